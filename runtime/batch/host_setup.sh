# EFA software and the ECS agent's settings on an AWS Batch container instance (Amazon Linux 2023 ECS GPU AMI).
# A user-data part of its own, after the FSx mount.
set -euo pipefail

# The job role reaches the containers through the ECS agent's credential endpoint, so no container needs the
# instance metadata service; awsvpc containers (every multi-node job) would otherwise reach it through their own
# interface and read the instance role (Amazon ECS Developer Guide, "Amazon EC2 container instance security
# considerations"). The instance's metadata hop limit of 1 keeps it from any other container.
echo "ECS_AWSVPC_BLOCK_IMDS=true" >>/etc/ecs/ecs.config

# Install the EFA software only where the AMI lacks it: `fi_info -p efa` lists the EFA provider when the driver
# and libfabric are in place (EC2 User Guide, "Get started with EFA and MPI", verify the installation).
if /opt/amazon/efa/bin/fi_info -p efa >/dev/null 2>&1; then
  echo "mlstack: EFA provider present, nothing to install"
  exit 0
fi
workdir=$(mktemp -d)
cd "$workdir"
curl -fsSL --retry 5 -o aws-efa-installer.tar.gz https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz
tar -xf aws-efa-installer.tar.gz
(cd aws-efa-installer && ./efa_installer.sh -y)
/opt/amazon/efa/bin/fi_info -p efa
