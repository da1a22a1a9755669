"""The first Slurm job's environment on the HyperPod AMI (a review of the first job found each of these)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.synth import ROOT

SCRIPTS = ROOT / "runtime" / "hyperpod_slurm"


def test_cluster_venv_pins_install_on_the_amis_python_3_10() -> None:
    # The HyperPod Slurm AMI is Ubuntu 22.04 (Python 3.10). NumPy 2.3 dropped Python 3.10 (NumPy 2.3.0 release notes:
    # "supports Python versions 3.11-3.13"), so a 2.3+ pin makes build_venv.sh fail and the first job wait for a venv
    # that never comes.
    pins = dict(
        line.split("==")
        for line in (SCRIPTS / "requirements-cluster.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    major, minor = (int(x) for x in pins["numpy"].split(".")[:2])
    assert (major, minor) < (2, 3), pins["numpy"]


def test_job_finds_the_amis_aws_ofi_nccl_plugin() -> None:
    # PyPI's torch brings its own NCCL: without the plugin on the library path NCCL falls back to TCP sockets.
    text = (SCRIPTS / "train.sbatch").read_text()
    path = re.search(r'export LD_LIBRARY_PATH="([^"]+)"', text)
    assert path is not None and "/opt/amazon/ofi-nccl/lib" in path.group(1) and "/opt/amazon/efa/lib" in path.group(1)
    assert "export FI_EFA_USE_HUGE_PAGE=0" in text
    # exported before srun, so every rank inherits it
    assert text.index("export LD_LIBRARY_PATH") < text.index("srun ")


def test_staging_leaves_logs_and_checkpoints_writable_by_the_submitting_user(tmp_path: Path) -> None:
    # Jobs run as `ubuntu` (README: `sudo su - ubuntu`), not root: the controller's staging must leave the log and
    # checkpoint directories writable by every user.
    here = tmp_path / "scripts"
    (here / "workloads").mkdir(parents=True)
    for name in ("stage_workloads.sh", "requirements-cluster.txt", "build_venv.sh", "train.sbatch"):
        (here / name).write_text((SCRIPTS / name).read_text())
    fsx = tmp_path / "fsx"
    venv = fsx / "mlstack" / "venv"
    venv.mkdir(parents=True)
    (venv / ".mlstack-ready").write_text("")  # no background build in this test
    subprocess.run(["bash", str(here / "stage_workloads.sh"), str(fsx)], check=True, capture_output=True)
    for d in (fsx / "mlstack" / "logs", fsx / "checkpoints"):
        assert d.stat().st_mode & 0o1777 == 0o1777, d
