#!/bin/bash
# Start the Slurm daemons of this node's role: start_slurm.sh <controller|login|compute> <controller-ips>.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 <controller|login|compute> <controller-ips>" >&2
  exit 2
fi
ROLE="$1"
CONTROLLERS="$2"
case "$ROLE" in
  controller)
    systemctl enable --now slurmctld
    ;;
  login)
    # Login nodes only submit: they need the configuration and munge, no daemon of their own.
    systemctl enable --now munge
    ;;
  compute)
    systemctl enable --now slurmd
    ;;
  *)
    echo "unknown role ${ROLE}" >&2
    exit 2
    ;;
esac
echo "[mlstack] slurm started as ${ROLE} (controllers ${CONTROLLERS})"
