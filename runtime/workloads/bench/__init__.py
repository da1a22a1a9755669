"""`make bench-workloads`: gradient compression to convergence, DDP vs FSDP vs DeepSpeed ZeRO, and OpenVINO fp32
vs int8 serving, printed as tables and drawn under docs/bench/.

Modules: `training` (the torchrun runs and their summaries), `openvino` (the MLP and the BERT-base-shaped encoder,
fp32 vs NNCF int8), `plots` (matplotlib, deterministic PNGs), `report` (plain-text tables, CPU time, the CPU's
int8 instructions); `__main__` runs them all.
"""
