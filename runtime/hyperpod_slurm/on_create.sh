#!/bin/bash
# HyperPod runs this once on every new node (LifeCycleConfig.OnCreate), from a copy of the S3 prefix.
# It mounts FSx for Lustre, sets up Slurm accounting on the controller, starts the Slurm daemons for this
# node's role and installs the node health check. Output goes to /var/log/provision/provisioning.log, which
# HyperPod uploads to CloudWatch Logs (/aws/sagemaker/Clusters/<name>/<id>).
set -euo pipefail

LOG_DIR=/var/log/provision
mkdir -p "$LOG_DIR"
exec > >(tee -a "$LOG_DIR/provisioning.log") 2>&1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
RESOURCE_CONFIG="${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}"
PARAMS="$HERE/provisioning_parameters.json"
lifecycle() { python3 -u "$HERE/lifecycle.py" --resource-config "$RESOURCE_CONFIG" --params "$PARAMS" "$@"; }

fail() {
  echo "[mlstack] on_create failed at line $1"
  # Leave time for the log agent to upload the provisioning log before HyperPod marks the node failed.
  sleep 60
}
trap 'fail $LINENO' ERR

read -r ROLE GROUP < <(lifecycle role)
echo "[mlstack] node role ${ROLE} (instance group ${GROUP})"

read -r FSX_DNS FSX_MOUNT_NAME FSX_PATH < <(lifecycle fsx)
if [[ "$FSX_DNS" != "-" ]]; then
  bash "$HERE/mount_fsx.sh" "$FSX_DNS" "$FSX_MOUNT_NAME" "$FSX_PATH"
fi

CONTROLLERS="$(lifecycle controllers)"
lifecycle wait-slurm-conf
if [[ "$ROLE" == "controller" ]]; then
  bash "$HERE/setup_accounting.sh"
fi
# Every node carries the same accounting lines (Slurm expects one slurm.conf on all nodes).
lifecycle update-slurm-conf --file /opt/slurm/etc/slurm.conf --accounting "${CONTROLLERS%%,*}"
bash "$HERE/install_health_check.sh" "$FSX_PATH"
bash "$HERE/start_slurm.sh" "$ROLE" "$CONTROLLERS"
echo "[mlstack] on_create done"
