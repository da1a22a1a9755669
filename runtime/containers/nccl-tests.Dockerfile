# EFA acceptance image: NVIDIA nccl-tests built with MPI on an AWS Deep Learning Container, whose EFA installer
# provides libfabric, Open MPI and the aws-ofi-nccl plugin. Used by `mlstack acceptance BLUEPRINT --image URI` on
# EKS, HyperPod-EKS and AWS Batch. Build from the repository root:
#   docker build -f runtime/containers/nccl-tests.Dockerfile -t <account>.dkr.ecr.<region>.amazonaws.com/nccl-tests:1 .
ARG BASE=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2
FROM ${BASE}
ARG NCCL_TESTS_VERSION=v2.16.4
RUN git clone --depth 1 --branch ${NCCL_TESTS_VERSION} https://github.com/NVIDIA/nccl-tests /opt/nccl-tests \
 && make -C /opt/nccl-tests MPI=1 MPI_HOME=/opt/amazon/openmpi CUDA_HOME=/usr/local/cuda -j"$(nproc)"
# sshd for mpirun. No key is baked in: on Kubernetes the Kubeflow Trainer's MPI plugin generates a key pair per
# TrainJob and mounts it at /home/mpiuser/.ssh (id_rsa, id_rsa.pub, authorized_keys; mode 0640, readable through
# fsGroup 1000); the nodes run sshd as mpiuser (uid 1000) on port 2222 with that key as host key, as Kubeflow's
# MPI runtime images do. On AWS Batch the main node makes a key per job (runtime/batch/nccl_tests_node.sh) and the
# nodes run sshd as root on 2222 with host keys made at start; the host keys of the package are removed here.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-server openssh-client \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \
 && mkdir -p /run/sshd \
 && printf '%s\n' 'Host *' '    Port 2222' '    StrictHostKeyChecking no' '    UserKnownHostsFile /dev/null' \
      >>/etc/ssh/ssh_config \
 && (id -u mpiuser >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash mpiuser) \
 && printf '%s\n' 'Port 2222' 'HostKey /home/mpiuser/.ssh/id_rsa' 'PidFile /home/mpiuser/sshd.pid' \
      'AuthorizedKeysFile /home/mpiuser/.ssh/authorized_keys' 'StrictModes no' 'PasswordAuthentication no' \
      >/home/mpiuser/.sshd_config \
 && chown mpiuser:mpiuser /home/mpiuser/.sshd_config
# No inherited entry point: the base's `bash -m dockerd_entrypoint.sh` ends in `eval "$@"`, which would re-parse
# the AWS Batch job's `bash -c <node script>` command (Batch replaces only CMD) into `bash -c #...`: see
# train.Dockerfile. CMD comes back because setting ENTRYPOINT clears the inherited one.
ENTRYPOINT []
CMD ["/bin/bash"]
