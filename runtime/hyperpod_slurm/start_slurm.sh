#!/bin/bash
# Start the Slurm daemon of this node's role: start_slurm.sh <controller|login|compute> <controller-ips>.
# HyperPod's Slurm is configless: only the controller has slurm.conf. Worker and login nodes run slurmd with
# `--conf-server <controllers>`, filled into the $SLURMD_OPTIONS of the AMI's slurmd.service, as the HyperPod
# reference lifecycle scripts do (awslabs/awsome-distributed-training, LifecycleScripts/base-config/start_slurm.sh).
# On a login node slurmd fetches the configuration (for sinfo, srun, sbatch) and exits: login nodes are not in
# slurm.conf. MLSTACK_SYSTEMD_DIR and MLSTACK_SYSTEMCTL move the unit directory and systemctl for the tests.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 <controller|login|compute> <controller-ips>" >&2
  exit 2
fi
ROLE="$1"
CONTROLLERS="$2"
SYSTEMD_DIR="${MLSTACK_SYSTEMD_DIR:-/etc/systemd/system}"
SYSTEMCTL="${MLSTACK_SYSTEMCTL:-systemctl}"

configless_slurmd() {
  local unit="$SYSTEMD_DIR/slurmd.service"
  if [[ -z "$CONTROLLERS" ]]; then
    echo "[mlstack] no controller address in the resource config" >&2
    return 1
  fi
  if grep -q -- '--conf-server' "$unit"; then
    echo "[mlstack] ${unit} already starts slurmd configless"
  elif grep -q -F "\$SLURMD_OPTIONS" "$unit"; then
    # Only $SLURMD_OPTIONS is substituted: the unit's other variables ($MAINPID) stay for systemd.
    # shellcheck disable=SC2016
    SLURMD_OPTIONS="--conf-server ${CONTROLLERS}" envsubst '$SLURMD_OPTIONS' < "$unit" > "$unit.mlstack"
    mv "$unit.mlstack" "$unit"
  else
    echo "[mlstack] ${unit} has no \$SLURMD_OPTIONS to pass --conf-server through" >&2
    return 1
  fi
  "$SYSTEMCTL" daemon-reload
}

case "$ROLE" in
  controller)
    # restart, not start: should HyperPod's agent have started slurmctld already, it reads the accounting include
    # and the health check setting only when it starts again.
    "$SYSTEMCTL" enable slurmctld
    "$SYSTEMCTL" restart slurmctld
    ;;
  compute)
    configless_slurmd
    "$SYSTEMCTL" enable --now slurmd
    ;;
  login)
    configless_slurmd
    "$SYSTEMCTL" enable --now slurmd || echo "[mlstack] slurmd exited on the login node after fetching the configuration"
    ;;
  *)
    echo "unknown role ${ROLE}" >&2
    exit 2
    ;;
esac
echo "[mlstack] slurm started as ${ROLE} (controllers ${CONTROLLERS})"
