#!/bin/bash
# HyperPod lifecycle script for nodes that join an EKS cluster (training.engine: hyperpod-eks).
#
# HyperPod runs it once on every new node, as root, before the node registers with EKS and before containerd
# starts. Unlike the Slurm scripts it configures no scheduler: kubelet, containerd and the device plugins come from
# the HyperPod EKS AMI and the HyperPod dependencies Helm chart. It waits for the extra EBS volume HyperPod mounts
# at /opt/sagemaker (InstanceStorageConfigs, training.hyperpod.worker_volume_gib) and points containerd's root
# (its image store and container snapshots) at /opt/sagemaker/containerd/data-root, so training images do not fill
# the root volume: the same edit of the AMI's /etc/eks/containerd/containerd-config.toml as AWS's HyperPod EKS
# lifecycle script (aws/sagemaker-hyperpod-cluster-setup, eks/cloudformation/resources/lifecycle-script/
# base-config/on_create.sh). kubelet's directory stays on the root volume, as there. Output goes to
# /var/log/provision/provisioning.log, which HyperPod uploads to CloudWatch Logs (/aws/sagemaker/Clusters/...); on
# failure it waits 60 s so the log reaches CloudWatch before HyperPod replaces the node. On a GPU node it then starts
# the CloudWatch agent (per-GPU nvidia-smi metrics, the kernel log's Xid lines) with the configuration uploaded next
# to it, as the Slurm on_create does; a node without nvidia-smi (Trainium) is left alone by the installer.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The paths can be overridden for tests only; HyperPod runs the script without any of these set.
LOG_FILE="${HYPERPOD_LOG_FILE:-/var/log/provision/provisioning.log}"
DATA_DISK="${HYPERPOD_DATA_DISK:-/opt/sagemaker}"
CONTAINERD_CONFIG="${HYPERPOD_CONTAINERD_CONFIG:-/etc/eks/containerd/containerd-config.toml}"
MOUNT_TRIES="${HYPERPOD_MOUNT_TRIES:-12}"

log() {
  echo "$(date -u +%FT%TZ) $*" | tee -a "$LOG_FILE"
}

wait_for_mount() {
  local path=$1 tries=$2 try
  for try in $(seq "$tries"); do
    if mountpoint -q "$path"; then
      return 0
    fi
    if [ "$try" -lt "$tries" ]; then  # no sleep after the last look
      sleep 5
    fi
  done
  return 1
}

# Sets (or replaces, commented or not) the top-level `root = ...` line of containerd's config. Idempotent: a second
# run (node reboot) writes the same line.
set_containerd_root() {
  local root=$1
  mkdir -p "$root"
  if grep -qE '^[# ]*root[[:space:]]*=' "$CONTAINERD_CONFIG"; then
    sed -i -E "s|^[# ]*root[[:space:]]*=.*|root = \"$root\"|" "$CONTAINERD_CONFIG"
  else
    # No root line: insert one before the first table, where top-level keys belong in TOML.
    awk -v line="root = \"$root\"" 'done == 0 && /^\[/ { print line; done = 1 } { print } END { if (done == 0) print line }' \
      "$CONTAINERD_CONFIG" >"$CONTAINERD_CONFIG.new"
    mv "$CONTAINERD_CONFIG.new" "$CONTAINERD_CONFIG"
  fi
}

main() {
  if ! wait_for_mount "$DATA_DISK" "$MOUNT_TRIES"; then
    log "$DATA_DISK is not mounted after $MOUNT_TRIES checks over $(((MOUNT_TRIES - 1) * 5)) s:" \
      "containerd keeps its root on the root volume"
  elif [ ! -f "$CONTAINERD_CONFIG" ]; then
    log "$CONTAINERD_CONFIG not found: containerd keeps its root on the root volume"
  else
    set_containerd_root "$DATA_DISK/containerd/data-root"
    log "$DATA_DISK is mounted: containerd's root (images, snapshots) is $DATA_DISK/containerd/data-root"
  fi
  # GPU metrics: a failure here costs the metrics, never the node.
  if [[ -f "$HERE/install_cloudwatch_agent.sh" && -f "$HERE/cloudwatch_agent.json" ]]; then
    bash "$HERE/install_cloudwatch_agent.sh" "$HERE/cloudwatch_agent.json" ||
      log "CloudWatch agent not started: no GPU metrics from this node"
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
