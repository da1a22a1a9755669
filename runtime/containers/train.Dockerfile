# Training image for the rendered TrainJob: an AWS Deep Learning Container (PyTorch, CUDA, EFA installer,
# libfabric, aws-ofi-nccl) plus the reference script at /opt/mlstack/runtime/workloads/train.py and DeepSpeed.
# Build from the repository root and push to your ECR, then set training.job.image to it:
#   docker build -f runtime/containers/train.Dockerfile -t <account>.dkr.ecr.<region>.amazonaws.com/mlstack-train:1 .
# Pick the DLC tag from https://github.com/aws/deep-learning-containers/blob/master/available_images.md
ARG BASE=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2
FROM ${BASE}
# DS_BUILD_OPS=0: DeepSpeed JIT-compiles the ops it needs at first use instead of at install time.
ENV DS_BUILD_OPS=0
RUN pip install --no-cache-dir deepspeed==0.19.8
COPY runtime/__init__.py /opt/mlstack/runtime/__init__.py
COPY runtime/workloads/__init__.py runtime/workloads/lm.py runtime/workloads/comm.py runtime/workloads/train.py \
     /opt/mlstack/runtime/workloads/
WORKDIR /opt/mlstack
