#!/bin/bash
# Build the first job's Python environment on FSx once: build_venv.sh <app-dir> (run by stage_workloads.sh).
# Every node runs the same HyperPod AMI, so a venv built on the controller runs on the workers. Ubuntu's python3
# creates venvs only with python3-venv installed; the package lists are refreshed first.
set -euo pipefail
APP="$1"
VENV="$APP/venv"
if ! python3 -c 'import ensurepip' 2> /dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300 update
  DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300 install python3-venv
fi
if python3 -m venv "$VENV" && "$VENV/bin/pip" install --disable-pip-version-check -r "$APP/requirements-cluster.txt"; then
  touch "$VENV/.mlstack-ready"
  echo "[mlstack] ${VENV} ready"
else
  touch "$APP/venv.failed"
  echo "[mlstack] building ${VENV} failed" >&2
  exit 1
fi
