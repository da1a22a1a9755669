#!/bin/bash
# Slurm HealthCheckProgram: drain this node when its accelerators or the shared file system are missing, so no
# job lands on it; HyperPod's own health agent decides on replacement (NodeRecovery: Automatic).
# Accelerators are checked only where their devices exist: the HyperPod AMI ships nvidia-smi on CPU instances
# too (the controller, login nodes, CPU groups), where it fails for want of a GPU.
set -uo pipefail
MLSTACK_HOME="${MLSTACK_HOME:-/opt/mlstack}"
# shellcheck disable=SC1091
[[ -r "$MLSTACK_HOME/health_check.env" ]] && source "$MLSTACK_HOME/health_check.env"
FSX_PATH="${MLSTACK_FSX_PATH:--}"
DEV="${MLSTACK_DEV_DIR:-/dev}"
NODE="$(hostname -s)"
problem=""

if [[ "$FSX_PATH" != "-" ]] && ! mountpoint -q "$FSX_PATH"; then
  problem="FSx not mounted at ${FSX_PATH}"
fi
if [[ -e "$DEV/nvidia0" ]] && ! nvidia-smi --query-gpu=index --format=csv,noheader > /dev/null 2>&1; then
  problem="${problem:+$problem; }nvidia-smi failed"
fi
if [[ -e "$DEV/neuron0" ]] && ! neuron-ls > /dev/null 2>&1; then
  problem="${problem:+$problem; }neuron-ls failed"
fi

if [[ -n "$problem" ]]; then
  scontrol update NodeName="$NODE" State=DRAIN Reason="mlstack health check: ${problem}"
  exit 1
fi
exit 0
