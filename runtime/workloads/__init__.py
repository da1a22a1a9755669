"""Reference workloads that run on the clusters mlstack builds (they need PyTorch; see requirements-workloads.txt).

`train.py` is the torchrun entry point of the rendered TrainJob; `serve/` is the OpenVINO int8 SageMaker
container; the EFA acceptance test (nccl-tests) is rendered and parsed by `mlstack.workloads.nccl`.
"""
