#!/bin/bash
# HyperPod runs this once on every new node (LifeCycleConfig.OnCreate), from a copy of the S3 prefix.
# HyperPod runs Slurm configless: its agent writes slurm.conf on the controller only, and slurmd on worker and
# login nodes fetches the configuration from slurmctld. So the controller's slurm.conf is the only one this edits
# (accounting include, health check), and workers and login nodes start slurmd with --conf-server.
# On every node: mount FSx for Lustre, install the node health check, start the Slurm daemon of the node's role,
# and on GPU nodes the CloudWatch agent (per-GPU and EFA metrics, the kernel log's Xid lines).
# On the controller also: slurmdbd accounting, and the first job's files on FSx (stage_workloads.sh).
# Output goes to /var/log/provision/provisioning.log, which HyperPod uploads to CloudWatch Logs
# (/aws/sagemaker/Clusters/<name>/<id>). Paths can be moved for tests (MLSTACK_* variables, see lifecycle.py).
set -euo pipefail

LOG_DIR="${MLSTACK_LOG_DIR:-/var/log/provision}"
mkdir -p "$LOG_DIR"
exec > >(tee -a "$LOG_DIR/provisioning.log") 2>&1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
RESOURCE_CONFIG="${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}"
PARAMS="$HERE/provisioning_parameters.json"
MLSTACK_HOME="${MLSTACK_HOME:-/opt/mlstack}"
lifecycle() { python3 -u "$HERE/lifecycle.py" --resource-config "$RESOURCE_CONFIG" --params "$PARAMS" "$@"; }

fail() {
  echo "[mlstack] on_create failed at line $1"
  # Leave time for the log agent to upload the provisioning log before HyperPod marks the node failed.
  sleep "${MLSTACK_FAIL_SLEEP_S:-60}"
}
trap 'fail $LINENO' ERR

read -r ROLE GROUP < <(lifecycle role)
echo "[mlstack] node role ${ROLE} (instance group ${GROUP})"

read -r FSX_DNS FSX_MOUNT_NAME FSX_PATH < <(lifecycle fsx)
if [[ "$FSX_DNS" != "-" ]]; then
  bash "$HERE/mount_fsx.sh" "$FSX_DNS" "$FSX_MOUNT_NAME" "$FSX_PATH"
fi

CONTROLLERS="$(lifecycle controllers)"
bash "$HERE/install_health_check.sh" "$FSX_PATH"
if [[ "$ROLE" == "controller" ]]; then
  lifecycle wait-slurm-conf
  bash "$HERE/setup_accounting.sh" "${CONTROLLERS%%,*}"
  lifecycle update-slurm-conf --health-check "$MLSTACK_HOME/health_check.sh"
fi
bash "$HERE/start_slurm.sh" "$ROLE" "$CONTROLLERS"
# GPU metrics (a host without nvidia-smi skips it): a failure here costs the metrics, never the node.
if [[ -f "$HERE/install_cloudwatch_agent.sh" && -f "$HERE/cloudwatch_agent.json" ]]; then
  bash "$HERE/install_cloudwatch_agent.sh" "$HERE/cloudwatch_agent.json" ||
    echo "[mlstack] CloudWatch agent not started: no GPU metrics from this node"
fi
if [[ "$ROLE" == "controller" && "$FSX_PATH" != "-" ]]; then
  bash "$HERE/stage_workloads.sh" "$FSX_PATH"
fi
echo "[mlstack] on_create done"
