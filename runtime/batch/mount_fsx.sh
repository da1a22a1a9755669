# FSx for Lustre at /fsx on an AWS Batch container instance (Amazon Linux 2023, ECS GPU AMI).
# Runs as its own user-data part, before the EFA part: a failure there cannot leave /fsx unmounted, and the
# containers bind-mount the host's /fsx. FSX_DNS_NAME, FSX_MOUNT_NAME and FSX_PATH are set by the line the CDK
# construct writes above this script.
set -euo pipefail
: "${FSX_DNS_NAME:?}" "${FSX_MOUNT_NAME:?}" "${FSX_PATH:?}"

retry() {
  # retry ATTEMPTS DELAY_SECONDS COMMAND...: the package mirror and the file system's DNS name can lag the boot.
  local attempts=$1 delay=$2 n=1
  shift 2
  until "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      echo "mlstack: '$*' failed $attempts times" >&2
      return 1
    fi
    n=$((n + 1))
    sleep "$delay"
  done
}

# Amazon Linux 2023 ships the Lustre client as a package (FSx for Lustre User Guide, "Installing the Lustre client").
if ! command -v mount.lustre >/dev/null 2>&1; then
  retry 5 10 dnf install -y lustre-client
fi
mkdir -p "$FSX_PATH"
if ! grep -q " $FSX_PATH lustre " /etc/fstab; then
  echo "$FSX_DNS_NAME@tcp:/$FSX_MOUNT_NAME $FSX_PATH lustre defaults,_netdev,flock,noatime 0 0" >>/etc/fstab
fi
mountpoint -q "$FSX_PATH" || retry 10 15 mount "$FSX_PATH"
mountpoint "$FSX_PATH"
