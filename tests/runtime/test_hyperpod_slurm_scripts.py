"""The HyperPod Slurm shell scripts one by one, with stand-ins for the commands they call (systemctl, scontrol,
srun, apt-get, mysql): what each does on which node. The same scripts against real daemons:
tests/runtime/test_hyperpod_slurm_daemons.py (`make test-slurm`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlstack.config.training_engines import LIFECYCLE_SCRIPTS_DIR

SCRIPTS = LIFECYCLE_SCRIPTS_DIR
BASH = shutil.which("bash") or "/bin/bash"
HYPERPOD_UNIT = """[Service]
ExecStart=/opt/slurm/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
"""


def _fake(bin_dir: Path, name: str, body: str = "") -> None:
    """A command that appends its name and arguments to calls.log, then runs `body`."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/bash\necho "{name} $*" >> "{bin_dir}/calls.log"\n{body}\n')
    path.chmod(0o755)


def _link(bin_dir: Path, *names: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)


def _calls(bin_dir: Path) -> list[str]:
    log = bin_dir / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _bash(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(SCRIPTS / script), *args], env=env, capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------ start_slurm.sh


@pytest.mark.parametrize("role", ["compute", "login"])
def test_workers_and_login_nodes_start_slurmd_configless(tmp_path: Path, role: str) -> None:
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "systemctl", 'if [[ "$*" == "enable --now slurmd" && -n "${FAIL:-}" ]]; then exit 1; fi')
    (tmp_path / "slurmd.service").write_text(HYPERPOD_UNIT)
    env = {
        "PATH": os.environ["PATH"],
        "MLSTACK_SYSTEMD_DIR": str(tmp_path),
        "MLSTACK_SYSTEMCTL": str(bin_dir / "systemctl"),
        # A login node is not in slurm.conf: its slurmd fetches the configuration and exits.
        **({"FAIL": "1"} if role == "login" else {}),
    }
    done = _bash("start_slurm.sh", role, "10.3.0.10,10.3.0.11", env=env)
    assert done.returncode == 0, done.stderr
    unit = (tmp_path / "slurmd.service").read_text()
    assert "ExecStart=/opt/slurm/sbin/slurmd -D -s --conf-server 10.3.0.10,10.3.0.11" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert _calls(bin_dir) == ["systemctl daemon-reload", "systemctl enable --now slurmd"]
    again = _bash("start_slurm.sh", role, "10.3.0.10,10.3.0.11", env=env)  # a rerun keeps the unit as it is
    assert again.returncode == 0 and (tmp_path / "slurmd.service").read_text() == unit


def test_slurmd_without_a_place_for_the_conf_server_fails_loudly(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "systemctl")
    (tmp_path / "slurmd.service").write_text("[Service]\nExecStart=/opt/slurm/sbin/slurmd -D\n")
    env = {
        "PATH": os.environ["PATH"],
        "MLSTACK_SYSTEMD_DIR": str(tmp_path),
        "MLSTACK_SYSTEMCTL": str(bin_dir / "systemctl"),
    }
    done = _bash("start_slurm.sh", "compute", "10.3.0.10", env=env)
    assert done.returncode == 1 and "no $SLURMD_OPTIONS" in done.stderr
    assert _calls(bin_dir) == []


def test_the_controller_starts_slurmctld_only(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "systemctl")
    env = {
        "PATH": os.environ["PATH"],
        "MLSTACK_SYSTEMD_DIR": str(tmp_path),
        "MLSTACK_SYSTEMCTL": str(bin_dir / "systemctl"),
    }
    assert _bash("start_slurm.sh", "controller", "10.3.0.10", env=env).returncode == 0
    assert _calls(bin_dir) == ["systemctl enable slurmctld", "systemctl restart slurmctld"]


# ----------------------------------------------------------------------------------------- health_check.sh


def _health_env(tmp_path: Path, *devices: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    # The HyperPod AMI ships nvidia-smi on CPU instances too; without a GPU it fails.
    _fake(bin_dir, "nvidia-smi", "exit 9")
    _fake(bin_dir, "neuron-ls", "exit 9")
    _fake(bin_dir, "scontrol")
    (tmp_path / "dev").mkdir()
    for device in devices:
        (tmp_path / "dev" / device).touch()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "health_check.env").write_text("MLSTACK_FSX_PATH=-\n")
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MLSTACK_HOME": str(tmp_path / "home"),
        "MLSTACK_DEV_DIR": str(tmp_path / "dev"),
    }


def test_health_check_leaves_a_cpu_node_alone(tmp_path: Path) -> None:
    env = _health_env(tmp_path)
    done = _bash("health_check.sh", env=env)
    assert done.returncode == 0
    assert [c for c in _calls(tmp_path / "bin") if c.startswith("scontrol")] == []


@pytest.mark.parametrize(("device", "problem"), [("nvidia0", "nvidia-smi failed"), ("neuron0", "neuron-ls failed")])
def test_health_check_drains_a_node_whose_accelerator_fails(tmp_path: Path, device: str, problem: str) -> None:
    env = _health_env(tmp_path, device)
    done = _bash("health_check.sh", env=env)
    assert done.returncode == 1
    drains = [c for c in _calls(tmp_path / "bin") if c.startswith("scontrol")]
    assert len(drains) == 1 and "State=DRAIN" in drains[0] and problem in drains[0]


# ------------------------------------------------------------------------------------- setup_accounting.sh


@pytest.mark.parametrize("ami_ships_mariadb", [True, False])
def test_accounting_installs_mariadb_only_where_missing(tmp_path: Path, ami_ships_mariadb: bool) -> None:
    bin_dir = tmp_path / "bin"
    _link(bin_dir, "dirname", "cat", "openssl")
    (bin_dir / "python3").symlink_to(sys.executable)
    for name in ("apt-get", "mysql", "chown", "systemctl"):
        _fake(bin_dir, name)
    if ami_ships_mariadb:
        _fake(bin_dir, "mariadbd")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=demo\nSlurmctldHost=ip-10-3-0-10(10.3.0.10)\n")
    env = {
        "PATH": str(bin_dir),
        "MLSTACK_SLURM_ETC": str(etc),
        "MLSTACK_SYSTEMCTL": str(bin_dir / "systemctl"),
        "MLSTACK_DBD_PASSWORD_FILE": str(tmp_path / "password"),
    }
    done = _bash("setup_accounting.sh", "10.3.0.10", env=env)
    assert done.returncode == 0, done.stderr
    apt = [c.split(" -o ")[0] + " " + c.split()[-1] for c in _calls(bin_dir) if c.startswith("apt-get")]
    assert apt == ([] if ami_ships_mariadb else ["apt-get -y update", "apt-get -y mariadb-server"])
    assert "include accounting.conf" in (etc / "slurm.conf").read_text()
    assert "AccountingStorageTRES=gres/gpu" in (etc / "accounting.conf").read_text()
    assert "StorageType=accounting_storage/mysql" in (etc / "slurmdbd.conf").read_text()
    assert oct((etc / "slurmdbd.conf").stat().st_mode & 0o777) == "0o600"


# --------------------------------------------------------------------------- the first job (train.sbatch)


def _job_env(tmp_path: Path, hyperpod: bool) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "srun")
    _fake(bin_dir, "scontrol", "echo ip-10-3-0-20; echo ip-10-3-0-21")
    fsx = tmp_path / "fsx"
    (fsx / "mlstack" / "venv").mkdir(parents=True)
    (fsx / "mlstack" / "venv" / ".mlstack-ready").touch()
    (tmp_path / "sagemaker_cluster").mkdir()
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MLSTACK_FSX": str(fsx),
        "MLSTACK_HYPERPOD_DIR": str(tmp_path / ("sagemaker_cluster" if hyperpod else "absent")),
        "SLURM_JOB_NODELIST": "ip-10-3-0-[20-21]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NAME": "mlstack-train",
    }


@pytest.mark.parametrize("hyperpod", [True, False])
def test_first_job_runs_torchrun_on_every_worker(tmp_path: Path, hyperpod: bool) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPTS / "train.sbatch"), "--steps", "50"],
        env=_job_env(tmp_path, hyperpod),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    (srun,) = [c for c in _calls(tmp_path / "bin") if c.startswith("srun")]
    fsx = tmp_path / "fsx"
    expected = [
        "srun",
        *(["--auto-resume=1"] if hyperpod else []),  # HyperPod's Slurm only: Debian's srun has no such option
        "--kill-on-bad-exit=1",
        f"{fsx}/mlstack/venv/bin/torchrun",
        "--nnodes=2",
        "--nproc-per-node=auto",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=ip-10-3-0-20:29500",
        "--rdzv-id=7",
        f"{fsx}/mlstack/runtime/workloads/train.py",
        "--checkpoint-dir",
        f"{fsx}/checkpoints/mlstack-train",
        "--checkpoint-every",
        "10",
        "--keep-checkpoints",
        "3",
        "--resume",
        "--steps",
        "50",
    ]
    assert srun.split() == expected


def test_first_job_stops_when_the_venv_build_failed(tmp_path: Path) -> None:
    env = _job_env(tmp_path, hyperpod=True)
    (tmp_path / "fsx" / "mlstack" / "venv" / ".mlstack-ready").unlink()
    (tmp_path / "fsx" / "mlstack" / "venv.failed").touch()
    done = subprocess.run(["bash", str(SCRIPTS / "train.sbatch")], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "logs/venv-build.log" in done.stderr
    assert [c for c in _calls(tmp_path / "bin") if c.startswith("srun")] == []


def test_train_sbatch_asks_for_every_worker() -> None:
    directives = [line for line in (SCRIPTS / "train.sbatch").read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --nodes=2" in directives and "#SBATCH --ntasks-per-node=1" in directives
    # Requeued after a node failure (outside HyperPod's auto-resume), appending to the first attempt's log.
    assert "#SBATCH --requeue" in directives and "#SBATCH --open-mode=append" in directives
