#!/bin/bash
# HyperPod lifecycle script for nodes that join an EKS cluster (training.engine: hyperpod-eks).
#
# HyperPod runs it once on every new node, as root, before the node registers with EKS. Unlike the Slurm scripts it
# configures no scheduler: kubelet, containerd and the device plugins come from the HyperPod EKS AMI and the
# HyperPod dependencies Helm chart. It waits for the extra EBS volume (/opt/sagemaker, InstanceStorageConfigs) and
# moves kubelet's directory onto it, so container images do not fill the root volume. Output goes to
# /var/log/provision/provisioning.log, which HyperPod uploads to CloudWatch Logs (/aws/sagemaker/Clusters/...);
# on failure it waits 60 s so the log reaches CloudWatch before HyperPod replaces the node (the same pattern as
# the aws-samples/awsome-distributed-training HyperPod EKS base-config on_create.sh).
set -euo pipefail

# The paths can be overridden for tests only; HyperPod runs the script without any of these set.
LOG_FILE="${HYPERPOD_LOG_FILE:-/var/log/provision/provisioning.log}"
DATA_DISK="${HYPERPOD_DATA_DISK:-/opt/sagemaker}"
KUBELET_DIR="${HYPERPOD_KUBELET_DIR:-/var/lib/kubelet}"
MOUNT_TRIES="${HYPERPOD_MOUNT_TRIES:-12}"

log() {
  echo "$(date -u +%FT%TZ) $*" | tee -a "$LOG_FILE"
}

wait_for_mount() {
  local path=$1 tries=$2
  for _ in $(seq "$tries"); do
    if mountpoint -q "$path"; then
      return 0
    fi
    sleep 5
  done
  return 1
}

# Idempotent: a second run (node reboot) finds the link and leaves it.
move_kubelet_dir() {
  mkdir -p "$DATA_DISK/kubelet"
  if [ -d "$KUBELET_DIR" ] && [ ! -L "$KUBELET_DIR" ]; then
    cp -a "$KUBELET_DIR/." "$DATA_DISK/kubelet/"
    rm -rf "$KUBELET_DIR"
  fi
  ln -sfn "$DATA_DISK/kubelet" "$KUBELET_DIR"
}

main() {
  if wait_for_mount "$DATA_DISK" "$MOUNT_TRIES"; then
    log "$DATA_DISK is mounted: kubelet data goes there"
    move_kubelet_dir
  else
    log "$DATA_DISK is not mounted after 60 s: kubelet keeps the root volume"
  fi
  log "done"
}

run() {
  mkdir -p "$(dirname "$LOG_FILE")"
  log "[start] on_create.sh"
  if ! main >>"$LOG_FILE" 2>&1; then
    log "[error] on_create.sh failed; waiting 60 s so the log is uploaded"
    sync
    sleep 60
    exit 1
  fi
  log "[stop] on_create.sh"
}

# Sourced by the tests for its functions; run by HyperPod.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  run
fi
