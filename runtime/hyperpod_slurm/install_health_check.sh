#!/bin/bash
# Install the node health check on this node: install_health_check.sh <fsx-path or ->. Every node needs the program
# at the same path: slurmd runs the HealthCheckProgram that the controller's slurm.conf names (on_create.sh sets
# it there; configless nodes get that setting from slurmctld).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MLSTACK_HOME="${MLSTACK_HOME:-/opt/mlstack}"
mkdir -p "$MLSTACK_HOME"
install -m 0755 "$HERE/health_check.sh" "$MLSTACK_HOME/health_check.sh"
echo "MLSTACK_FSX_PATH=${1:--}" > "$MLSTACK_HOME/health_check.env"
