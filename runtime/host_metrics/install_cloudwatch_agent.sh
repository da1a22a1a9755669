#!/bin/bash
# The CloudWatch agent on a GPU host of AWS Batch (Amazon Linux 2023 ECS GPU AMI) or SageMaker HyperPod Slurm
# (Ubuntu DLAMI): per-GPU nvidia-smi metrics, EFA counters, and the kernel log (NVIDIA Xid lines) to CloudWatch.
# Usage: install_cloudwatch_agent.sh CONFIG_JSON (the agent configuration the stack rendered; its agent.region
# names the region). A host without nvidia-smi (a Slurm controller or login node) is left alone.
# Paths can be moved for the tests: MLSTACK_ROOT (prefix of every system path), MLSTACK_EFA_SYSFS.
set -euo pipefail

CONFIG_SRC="$1"
ROOT="${MLSTACK_ROOT:-}"
EFA_SYSFS="${MLSTACK_EFA_SYSFS:-/sys/class/infiniband}"
AGENT_DIR="$ROOT/opt/aws/amazon-cloudwatch-agent"
CONFIG="$AGENT_DIR/etc/mlstack.json"
KERNEL_LOG_DIR="$ROOT/var/log/mlstack"
UNIT="$ROOT/etc/systemd/system/mlstack-kernel-log.service"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "[mlstack] no nvidia-smi on this host: no GPU metrics agent"
  exit 0
fi
region="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["agent"]["region"])' "$CONFIG_SRC")"

# The agent package from its regional S3 download location (CloudWatch User Guide, "Download and install the
# CloudWatch agent using the command line"): the same current version on both AMIs (the `efa` section needs
# 1.300068.0 or later), over the VPC's S3 gateway endpoint or NAT.
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) echo "[mlstack] unsupported architecture $(uname -m)"; exit 1 ;;
esac
base="https://amazoncloudwatch-agent-${region}.s3.${region}.amazonaws.com"
workdir="$(mktemp -d)"
if command -v dpkg >/dev/null 2>&1; then
  curl -fsSL --retry 5 -o "$workdir/amazon-cloudwatch-agent.deb" "$base/ubuntu/${arch}/latest/amazon-cloudwatch-agent.deb"
  dpkg -i -E "$workdir/amazon-cloudwatch-agent.deb"
else
  curl -fsSL --retry 5 -o "$workdir/amazon-cloudwatch-agent.rpm" "$base/amazon_linux/${arch}/latest/amazon-cloudwatch-agent.rpm"
  rpm -U --replacepkgs "$workdir/amazon-cloudwatch-agent.rpm"
fi
rm -rf "$workdir"

# The configuration, without the EFA section on a host with no EFA device (the agent's EFA input reads the
# devices' counters under /sys/class/infiniband).
mkdir -p "$AGENT_DIR/etc"
efa=0
if compgen -G "$EFA_SYSFS/*" >/dev/null; then efa=1; fi
python3 - "$CONFIG_SRC" "$CONFIG" "$efa" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
if sys.argv[3] != "1":
    config["metrics"]["metrics_collected"].pop("efa", None)
json.dump(config, open(sys.argv[2], "w"), indent=1)
PY

# Amazon Linux 2023 keeps the kernel log in the journal only (no rsyslog), and the agent reads files: a unit
# appends the kernel's journal entries to a file, from the start of the boot, resuming after the last entry it
# wrote when it restarts (journalctl --cursor-file, systemd 242 and later).
mkdir -p "$KERNEL_LOG_DIR" "$ROOT/var/lib/mlstack" "$(dirname "$UNIT")"
cat >"$UNIT" <<'UNIT'
[Unit]
Description=mlstack: kernel messages (NVIDIA Xid lines) to a file the CloudWatch agent uploads
After=systemd-journald.service

[Service]
ExecStart=/usr/bin/journalctl --dmesg --boot --follow --no-tail --output=short-iso --cursor-file=/var/lib/mlstack/kernel-log.cursor
StandardOutput=append:/var/log/mlstack/kernel.log
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now mlstack-kernel-log.service

"$AGENT_DIR/bin/amazon-cloudwatch-agent-ctl" -a fetch-config -m ec2 -s -c "file:$CONFIG"
echo "[mlstack] CloudWatch agent started (EFA counters: $efa)"
