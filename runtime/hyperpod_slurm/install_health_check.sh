#!/bin/bash
# Install the node health check Slurm runs every HealthCheckInterval: install_health_check.sh <fsx-path or ->.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TARGET=/opt/mlstack/health_check.sh
mkdir -p /opt/mlstack
install -m 0755 "$HERE/health_check.sh" "$TARGET"
echo "MLSTACK_FSX_PATH=${1:--}" > /opt/mlstack/health_check.env
python3 "$HERE/lifecycle.py" update-slurm-conf --file /opt/slurm/etc/slurm.conf --health-check "$TARGET"
