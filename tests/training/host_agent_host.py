"""A GPU host for the host agent installer's tests (runtime/host_metrics/install_cloudwatch_agent.sh): a fake root,
a PATH of stand-ins for the package tools, systemd, curl, gpg and nvidia-smi, and a run of the installer with the
hyperpod-slurm-training blueprint's agent configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mlstack.config import load
from mlstack.constructs.training.host_agent import HOST_AGENT_SCRIPT
from mlstack.design.host_metrics import agent_config

_TOOLS = ("bash", "mktemp", "rm", "mkdir", "cat", "dirname", "env", "grep", "seq", "sleep")
FINGERPRINT = "937616F3450B7D806CBD9725D58167303B789C72"
VALIDSIG = f"[GNUPG:] VALIDSIG 1111222233334444555566667777888899990000 2026-07-22 0 0 4 0 1 10 00 {FINGERPRINT}"


def host(
    tmp_path: Path,
    *,
    gpu: bool | None,
    deb: bool,
    efa_devices: int,
    installed: str | None = None,
    signature: str = VALIDSIG,
    nvidia_pci: bool = False,
    imds_url: str = "http://127.0.0.1:9",
) -> tuple[Path, dict[str, str], Path]:
    """A fake root, a PATH of stand-ins (each records its arguments in calls.log) and the EFA sysfs folder.
    `gpu`: True, nvidia-smi lists a GPU; False, nvidia-smi is there and finds none (a CPU node of the DLAMI); None,
    no nvidia-smi. `installed`: the agent version already on the host. `signature`: what `gpg --verify` reports.
    `nvidia_pci`: an NVIDIA 3D controller on the PCI bus. `imds_url`: the instance metadata the failure report
    reads, and where it POSTs PutMetricData (tests/training/imds_stand_in.py records it)."""
    root, bin_dir, sysfs, pci = tmp_path / "root", tmp_path / "bin", tmp_path / "infiniband", tmp_path / "pci"
    for d in (root, bin_dir, sysfs, pci):
        d.mkdir()
    for i in range(efa_devices):
        (sysfs / f"rdmap{i}s0").mkdir()
    (pci / "0000:00:1f.0").mkdir()
    (pci / "0000:00:1f.0/vendor").write_text("0x1d0f\n")  # an ENA adapter: not a GPU
    (pci / "0000:00:1f.0/class").write_text("0x020000\n")
    if nvidia_pci:
        (pci / "0000:53:00.0").mkdir()
        (pci / "0000:53:00.0/vendor").write_text("0x10de\n")
        (pci / "0000:53:00.0/class").write_text("0x030200\n")
    for tool in _TOOLS:
        real = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(real.stdout.strip())
    (bin_dir / "python3").symlink_to(sys.executable)
    log = tmp_path / "calls.log"
    outputs = {
        "uname": "echo x86_64",
        "nvidia-smi": "echo 'GPU 0: NVIDIA H100 80GB HBM3'" if gpu else "exit 9",
        "gpg": f'[[ "$*" == *--verify* ]] && echo "{signature}"; true',
        "curl": f'[[ "$*" == *"-K -"* ]] && cat >>{tmp_path / "report.cfg"}; true',
    }
    stubs = ["curl", "systemctl", "rpm", "uname", "gpg"] + (["dpkg"] if deb else [])
    stubs += ["nvidia-smi"] if gpu is not None else []
    for stub in stubs:
        (bin_dir / stub).write_text(f'#!/bin/bash\necho "{stub} $*" >>{log}\n{outputs.get(stub, "")}\n')
        (bin_dir / stub).chmod(0o755)
    ctl = root / "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
    ctl.parent.mkdir(parents=True)
    ctl.write_text(
        f'#!/bin/bash\necho "ctl $*" >>{log}\n[[ "$*" == "-a status" ]] && echo \'{{"status": "running"}}\'\ntrue\n'
    )
    ctl.chmod(0o755)
    if installed is not None:
        (ctl.parent / "CWAGENT_VERSION").write_text(installed + "\n")
    env = {
        "PATH": str(bin_dir),
        "MLSTACK_ROOT": str(root),
        "MLSTACK_EFA_SYSFS": str(sysfs),
        "MLSTACK_PCI_SYSFS": str(pci),
        "MLSTACK_IMDS": imds_url,
        "MLSTACK_MONITORING_ENDPOINT": imds_url,
        "MLSTACK_WAIT_STEP_S": "0",
        "HOME": str(tmp_path),
    }
    return root, env, log


def run(
    tmp_path: Path, env: dict[str, str], *, ok: bool = True, script: Path = HOST_AGENT_SCRIPT
) -> subprocess.CompletedProcess[str]:
    """The installer (`script`: the repository's, or a copy) run on the host `host` made."""
    config = load("hyperpod-slurm-training")
    assert config.training is not None
    source = tmp_path / "cloudwatch_agent.json"
    source.write_text(json.dumps(agent_config(config, config.training)))
    result = subprocess.run(["bash", str(script), str(source)], env=env, capture_output=True, text=True, check=False)
    assert (result.returncode == 0) is ok, result.stdout + result.stderr
    return result


BASE = "https://amazoncloudwatch-agent-us-east-1.s3.us-east-1.amazonaws.com"
VERSION = "1.300071.0b1720"
