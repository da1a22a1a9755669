# Training image of the rendered job: an AWS Deep Learning Container (PyTorch, CUDA, EFA installer, libfabric,
# aws-ofi-nccl) plus DeepSpeed and the reference script at /opt/mlstack/runtime/workloads/train.py.
# `cdk deploy` builds it (a CDK Docker image asset, context = the runtime/ folder) and pushes it to the CDK
# bootstrap repository; by hand, from the repository root:
#   docker build -f runtime/containers/train.Dockerfile -t mlstack-train runtime
# The base comes from ECR Public, which needs no `docker login` (the same DLC as
# 763104351884.dkr.ecr.<region>.amazonaws.com/pytorch-training, which does). Tags:
# https://github.com/aws/deep-learning-containers/blob/master/available_images.md
ARG BASE=public.ecr.aws/deep-learning-containers/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2
FROM ${BASE}
# DS_BUILD_OPS=0: DeepSpeed JIT-compiles the ops it needs at first use instead of at install time.
ENV DS_BUILD_OPS=0
RUN pip install --no-cache-dir deepspeed==0.19.8
# Every file copied here is listed in mlstack.k8s.image.TRAIN_IMAGE_FILES (the build context holds nothing else).
COPY __init__.py /opt/mlstack/runtime/__init__.py
COPY workloads/__init__.py workloads/comm.py workloads/elastic.py workloads/lm.py workloads/train.py /opt/mlstack/runtime/workloads/
WORKDIR /opt/mlstack
