"""What mlstack generates for the reference workloads (runtime/workloads/): the DeepSpeed config from a
blueprint's model section, and the EFA acceptance test (nccl-tests job and its output parser). Pure Python:
no PyTorch or DeepSpeed import here."""
