#!/bin/bash
# Slurm HealthCheckProgram: drain this node when its accelerators or the shared file system are missing, so no
# job lands on it; HyperPod's own health agent decides on replacement (NodeRecovery: Automatic).
set -uo pipefail
# shellcheck disable=SC1091
[[ -r /opt/mlstack/health_check.env ]] && source /opt/mlstack/health_check.env
FSX_PATH="${MLSTACK_FSX_PATH:--}"
NODE="$(hostname -s)"
problem=""

if [[ "$FSX_PATH" != "-" ]] && ! mountpoint -q "$FSX_PATH"; then
  problem="FSx not mounted at ${FSX_PATH}"
fi
if command -v nvidia-smi > /dev/null && ! nvidia-smi --query-gpu=index --format=csv,noheader > /dev/null 2>&1; then
  problem="${problem:+$problem; }nvidia-smi failed"
fi
if command -v neuron-ls > /dev/null && ! neuron-ls > /dev/null 2>&1; then
  problem="${problem:+$problem; }neuron-ls failed"
fi

if [[ -n "$problem" ]]; then
  scontrol update NodeName="$NODE" State=DRAIN Reason="mlstack health check: ${problem}"
  exit 1
fi
exit 0
