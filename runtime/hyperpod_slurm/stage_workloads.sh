#!/bin/bash
# Controller only: put the first job on FSx for Lustre, where every node sees it: stage_workloads.sh <fsx-path>.
#   <fsx>/mlstack/runtime/workloads/   the reference training code (runtime/workloads, uploaded with these scripts)
#   <fsx>/mlstack/train.sbatch         the job: torchrun on every worker through srun
#   <fsx>/mlstack/venv/                its Python environment, built once in the background (build_venv.sh)
#   <fsx>/mlstack/logs/                job and build logs
# The build runs detached so that node provisioning does not wait for a multi-GB PyTorch download; the job
# waits for it (train.sbatch).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FSX="$1"
APP="$FSX/mlstack"

mkdir -p "$APP/runtime" "$APP/logs" "$FSX/checkpoints"
# Jobs run as the user who submits them (the AMI's `ubuntu`, the same UID on every node), not as root: logs and
# checkpoints are writable by every user, sticky like /tmp.
chmod 1777 "$APP/logs" "$FSX/checkpoints"
rm -rf "$APP/runtime/workloads.new"
cp -r "$HERE/workloads" "$APP/runtime/workloads.new"
rm -rf "$APP/runtime/workloads"
mv "$APP/runtime/workloads.new" "$APP/runtime/workloads"
install -m 0644 "$HERE/requirements-cluster.txt" "$APP/requirements-cluster.txt"
install -m 0755 "$HERE/build_venv.sh" "$APP/build_venv.sh"
# The job's default file-system path is this cluster's mount point.
sed "s#MLSTACK_FSX:-/fsx}#MLSTACK_FSX:-${FSX}}#" "$HERE/train.sbatch" > "$APP/train.sbatch"
chmod 0644 "$APP/train.sbatch"

if [[ -e "$APP/venv/.mlstack-ready" ]]; then
  echo "[mlstack] ${APP}/venv is ready"
else
  rm -f "$APP/venv.failed"
  setsid nohup bash "$APP/build_venv.sh" "$APP" > "$APP/logs/venv-build.log" 2>&1 < /dev/null &
  echo "[mlstack] building ${APP}/venv in the background (log: ${APP}/logs/venv-build.log)"
fi
echo "[mlstack] first job staged: cd ${APP} && sbatch train.sbatch"
