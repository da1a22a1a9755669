# EFA acceptance image: NVIDIA nccl-tests built with MPI on an AWS Deep Learning Container, whose EFA installer
# provides libfabric, Open MPI and the aws-ofi-nccl plugin. Used by `mlstack acceptance BLUEPRINT`; pass the
# pushed URI with --image. Build from the repository root:
#   docker build -f runtime/containers/nccl-tests.Dockerfile -t <account>.dkr.ecr.<region>.amazonaws.com/nccl-tests:1 .
ARG BASE=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2
FROM ${BASE}
ARG NCCL_TESTS_VERSION=v2.16.4
RUN git clone --depth 1 --branch ${NCCL_TESTS_VERSION} https://github.com/NVIDIA/nccl-tests /opt/nccl-tests \
 && make -C /opt/nccl-tests MPI=1 MPI_HOME=/opt/amazon/openmpi CUDA_HOME=/usr/local/cuda -j"$(nproc)"
# The Kubeflow Trainer MPI runtime mounts the SSH keys at /home/mpiuser/.ssh; the nodes run sshd.
RUN apt-get update && apt-get install -y --no-install-recommends openssh-server && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/run/sshd && useradd -m mpiuser || true
