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
# The base's ENTRYPOINT (`bash -m dockerd_entrypoint.sh`, which ends in `eval "$@"`) would re-parse an AWS Batch
# job's command: Batch's `command` replaces only CMD (a job definition has no entry point), and eval turns
# `bash -c "exec python ..."` into `bash -c exec python ...`, a script that runs nothing and exits 0. Without it,
# the command is PID 1 itself (the launcher, which handles SIGTERM). The base's entry script only adds telemetry
# and a CUDA-compat check whose LD_LIBRARY_PATH stays in its own subshell; Kubernetes pods already skip it (their
# `command` replaces the entry point). Setting ENTRYPOINT clears the inherited CMD (Dockerfile reference,
# "Understand how CMD and ENTRYPOINT interact"), so CMD gives `docker run -it` its shell back.
# https://github.com/aws/deep-learning-containers (pytorch/training/docker/build_artifacts/dockerd_entrypoint.sh)
ENTRYPOINT []
CMD ["/bin/bash"]
