"""The HyperPod Slurm lifecycle scripts against real Slurm daemons (Debian's slurm-wlm, slurmdbd, munge, MariaDB):
`make test-slurm`, which installs them; run as root, about a minute.

One machine plays the controller and a worker, in a scratch prefix: HyperPod's resource config and the stack's
provisioning parameters, a controller slurm.conf like the one HyperPod's agent writes, the AMI's slurmd.service
with `$SLURMD_OPTIONS`. on_create.sh runs the controller path (MariaDB, slurmdbd, accounting.conf, health check,
slurmctld) and the worker path (configless slurmd), each node told its address by MLSTACK_NODE_ADDRESS. Then
`sinfo` shows the worker, `srun -N1 hostname` returns, `sacct` has the job, and the first job (train.sbatch)
runs through sbatch, srun and torchrun. A worker started the way the scripts started it before (slurmd with no
--conf-server, reading the six-line slurm.conf they wrote) never registers.

What this cannot reproduce of the HyperPod AMI, and how it stands in:
- systemd: not running here; tests/runtime/slurm/systemctl starts each daemon the scripts `enable --now`, slurmd
  from the ExecStart= line of the unit the scripts rendered (systemd's other behaviour, restarts and ordering, is
  not exercised). HyperPod's slurmd.service and its `/opt/slurm` build are stood in for by Debian's binaries with
  a unit written here; slurm.conf is HyperPod's in shape (SlurmctldHost, enable_configless, NodeName, partition),
  not its exact content, which the HyperPod agent writes at run time.
- Slurm 22.05 (Debian 12) rather than the AMI's version; no cgroup plugins (proctrack/linuxproc, task/none);
  HyperPod's `--auto-resume` srun option does not exist in Debian's Slurm (train.sbatch passes it only on
  HyperPod: tests/runtime/test_hyperpod_lifecycle.py checks that path with a stand-in srun).
- One host: the worker and the controller share it (slurmd on 127.0.0.1), so no login node runs (its slurmd
  would take the worker's name and port); no FSx (a scratch directory stands in for /fsx), no GPU, no EFA.
- PyTorch: the first job runs real torchrun and train.py on CPU when MLSTACK_WORKLOADS_PYTHON names a Python with
  torch (the Makefile passes .venv-workloads' when it exists), else a stand-in torchrun that records its command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlstack.config.training_engines import LIFECYCLE_SCRIPTS_DIR, WORKLOADS_DIR
from mlstack.constructs.training.hyperpod import HyperPodInstanceGroup, slurm_parameters

pytestmark = pytest.mark.skipif(os.environ.get("MLSTACK_SLURM") != "1", reason="real daemons: `make test-slurm`")

SHIMS = Path(__file__).with_name("slurm")
CONTROLLER, WORKER = "127.0.0.1", "127.0.0.2"
HOST = socket.gethostname().split(".")[0]
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MYSQL_SOCKET = Path("/run/mysqld/mysqld.sock")
DAEMON_PORTS = (6817, 6818, 6819)
SLURMD_UNIT = """[Unit]
Description=Slurm node daemon (stand-in for the HyperPod AMI's unit)
[Service]
Type=simple
ExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
"""
TODAYS_WORKER_CONF = """AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobAcctGatherType=jobacct_gather/cgroup
HealthCheckProgram=/opt/mlstack/health_check.sh
HealthCheckInterval=300
HealthCheckNodeState=ANY
"""
"""The slurm.conf the scripts wrote on a worker before (lifecycle.py update-slurm-conf on a node with none)."""


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _live(sock: Path) -> bool:
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def _stop(pid_file: Path) -> None:
    if not pid_file.is_file():
        return
    pid = int(pid_file.read_text().split()[0])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _controller_conf(prefix: Path) -> str:
    """slurm.conf as HyperPod's agent writes it on the controller (configless, the nodes by name and address)."""
    return "\n".join(
        [
            "ClusterName=mlstack-test",
            f"SlurmctldHost={HOST}({CONTROLLER})",
            "SlurmctldParameters=enable_configless",
            "SlurmUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={prefix}/state",
            f"SlurmdSpoolDir={prefix}/spool",
            f"SlurmctldPidFile={prefix}/run/slurmctld.pid",
            f"SlurmdPidFile={prefix}/run/slurmd.pid",
            f"SlurmctldLogFile={prefix}/log/slurmctld.log",
            f"SlurmdLogFile={prefix}/log/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "ReturnToService=2",
            f"NodeName={HOST} NodeAddr={CONTROLLER} CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN",
            f"PartitionName=p5 Nodes={HOST} Default=YES State=UP",
            "",
        ]
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    for port in DAEMON_PORTS:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is taken: a Slurm daemon already runs here"
    assert not _live(MYSQL_SOCKET), f"a MariaDB already serves {MYSQL_SOCKET}"
    prefix = tmp_path_factory.mktemp("hyperpod")
    shim = prefix / "shim"
    # Every daemon's PID goes here; `make test-slurm` passes a directory of its own and kills what is left in it
    # on exit, should this process itself be killed before its cleanup below.
    pids = Path(os.environ.get("MLSTACK_SLURM_PIDS") or shim)
    for d in ("state", "spool", "run", "log", "shim", "etc", "systemd", "worker-systemd", "home", "fsx", "provision"):
        (prefix / d).mkdir()
    scripts = prefix / "lifecycle"
    shutil.copytree(LIFECYCLE_SCRIPTS_DIR, scripts, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(WORKLOADS_DIR, scripts / "workloads", ignore=shutil.ignore_patterns("__pycache__", "serve"))
    groups = [
        HyperPodInstanceGroup(name="controller", instance_type="ml.m7i.xlarge", count=1, role="controller"),
        HyperPodInstanceGroup(name="p5", instance_type="ml.p5.48xlarge", count=1, efa=True),
    ]
    (scripts / "provisioning_parameters.json").write_text(json.dumps(slurm_parameters(groups, None, None, "/fsx")))
    resource_config = {
        "InstanceGroups": [
            {"Name": "controller", "Instances": [{"InstanceName": "controller-1", "CustomerIpAddress": CONTROLLER}]},
            {"Name": "p5", "Instances": [{"InstanceName": "p5-1", "CustomerIpAddress": WORKER}]},
        ]
    }
    (prefix / "resource_config.json").write_text(json.dumps(resource_config))
    (prefix / "etc" / "slurm.conf").write_text(_controller_conf(prefix))
    (prefix / "worker-systemd" / "slurmd.service").write_text(SLURMD_UNIT)
    bin_dir = prefix / "bin"
    bin_dir.mkdir()
    shutil.copy(SHIMS / "systemctl", bin_dir / "systemctl")
    (bin_dir / "apt-get").write_text('#!/bin/bash\necho "apt-get $*" >> "$SHIM_DIR/calls.log"\n')
    (bin_dir / "apt-get").chmod(0o755)
    base_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SHIM_DIR": str(shim),
        "PID_DIR": str(pids),
        "SAGEMAKER_RESOURCE_CONFIG_PATH": str(prefix / "resource_config.json"),
        "MLSTACK_SLURM_ETC": str(prefix / "etc"),
        "MLSTACK_SYSTEMCTL": str(bin_dir / "systemctl"),
        "MLSTACK_HOME": str(prefix / "home"),
        "MLSTACK_LOG_DIR": str(prefix / "provision"),
        "MLSTACK_DBD_PASSWORD_FILE": str(prefix / "dbd-password"),
        "MLSTACK_FAIL_SLEEP_S": "0",
    }
    started_munge = not _live(MUNGE_SOCKET)
    # `timeout` sends SIGTERM: turn it into KeyboardInterrupt, on which pytest still runs this fixture's cleanup.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    slurm_run_conf = Path("/run/slurm/conf")
    try:
        if started_munge:
            key = prefix / "munge.key"
            key.write_bytes(os.urandom(128))
            key.chmod(0o600)
            MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
            _run(
                [
                    "munged",
                    f"--key-file={key}",
                    f"--pid-file={pids}/munged.pid",
                    f"--log-file={prefix}/log/munged.log",
                    f"--seed-file={prefix}/munge.seed",
                    "--force",
                ]
            )
        MYSQL_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        _run(
            [
                "mariadb-install-db",
                f"--datadir={shim}/mysql",
                "--user=root",
                "--auth-root-authentication-method=socket",
            ],
            timeout=120,
        )
        t0 = time.monotonic()
        controller_env = {
            **base_env,
            "MLSTACK_NODE_ADDRESS": CONTROLLER,
            "MLSTACK_SYSTEMD_DIR": str(prefix / "systemd"),
        }
        controller = _run(["bash", str(scripts / "on_create.sh")], env=controller_env, timeout=120)
        worker_env = {
            **base_env,
            "MLSTACK_NODE_ADDRESS": WORKER,
            "MLSTACK_SYSTEMD_DIR": str(prefix / "worker-systemd"),
            "MLSTACK_SLURM_ETC": str(prefix / "worker-etc"),  # a worker has no slurm.conf: this stays missing
        }
        worker = _run(["bash", str(scripts / "on_create.sh")], env=worker_env, timeout=120)
        client = {**os.environ, "SLURM_CONF": str(prefix / "etc" / "slurm.conf")}
        for _ in range(150):  # registered: the node leaves the state `unknown` it has in slurm.conf
            states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=client, capture_output=True, text=True)
            if f"{HOST} unk" not in states.stdout:
                break
            time.sleep(0.2)
        yield {
            "prefix": prefix,
            "scripts": scripts,
            "client": client,
            "controller_log": controller,
            "worker_log": worker,
            "calls": (shim / "calls.log").read_text(),
            "provision_s": time.monotonic() - t0,
        }
    finally:
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadb"):
            _stop(pids / f"{name}.pid")
        if started_munge:
            _stop(pids / "munged.pid")
        signal.signal(signal.SIGTERM, previous)
        if slurm_run_conf.is_symlink() and str(prefix) in str(slurm_run_conf.readlink()):
            slurm_run_conf.unlink()


def test_controller_path_configures_only_the_controller(cluster: dict[str, Any]) -> None:
    prefix = cluster["prefix"]
    conf = (prefix / "etc" / "slurm.conf").read_text()
    assert "include accounting.conf" in conf.splitlines()
    assert f"HealthCheckProgram={prefix}/home/health_check.sh" in conf
    accounting = (prefix / "etc" / "accounting.conf").read_text()
    for line in (
        "JobAcctGatherType=jobacct_gather/linux",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={CONTROLLER}",
        "AccountingStoragePort=6819",
        "AccountingStorageTRES=gres/gpu",
    ):
        assert line in accounting.splitlines()
    # A worker has no slurm.conf and gets none; its slurmd unit carries the controller address.
    assert not (prefix / "worker-etc").exists()
    unit = (prefix / "worker-systemd" / "slurmd.service").read_text()
    assert f"ExecStart=/usr/sbin/slurmd -D -s --conf-server {CONTROLLER}" in unit
    assert "$MAINPID" in unit  # only $SLURMD_OPTIONS was substituted
    # MariaDB "ships with the AMI" here (mariadbd is installed): no apt-get at all.
    assert "apt-get" not in cluster["calls"]
    assert cluster["provision_s"] < 60


def test_configless_worker_registers_and_runs_a_step(cluster: dict[str, Any]) -> None:
    client = cluster["client"]
    nodes = _run(["sinfo", "-h", "-N", "-o", "%N %t"], env=client).split()
    assert nodes[:2] == [HOST, "idle"], nodes  # idle, not drained: the health check passes on a CPU node
    assert _run(["srun", "-N1", "hostname"], env=client, timeout=60).strip() == HOST
    # Accounting went through slurmdbd into MariaDB.
    jobs = ""
    for _ in range(50):
        jobs = _run(["sacct", "-n", "-X", "-P", "-o", "JobName,State"], env=client)
        if "hostname|COMPLETED" in jobs:
            break
        time.sleep(0.2)
    assert "hostname|COMPLETED" in jobs


def test_first_job_runs_train_py_over_srun_and_torchrun(cluster: dict[str, Any]) -> None:
    prefix, client = cluster["prefix"], cluster["client"]
    fsx = prefix / "fsx"
    app = fsx / "mlstack"
    venv = app / "venv"
    (venv / "bin").mkdir(parents=True)
    python = os.environ.get("MLSTACK_WORKLOADS_PYTHON")
    if python:
        torchrun = f'#!/bin/bash\nexec {python} -m torch.distributed.run "$@"\n'
    else:
        torchrun = f'#!/bin/bash\necho "torchrun $*" >> {prefix}/torchrun.log\n'
    (venv / "bin" / "torchrun").write_text(torchrun)
    (venv / "bin" / "torchrun").chmod(0o755)
    (venv / ".mlstack-ready").touch()
    _run(["bash", str(cluster["scripts"] / "stage_workloads.sh"), str(fsx)])
    assert (app / "runtime" / "workloads" / "train.py").is_file()
    env = {**client, "MLSTACK_HYPERPOD_DIR": str(prefix / "not-hyperpod"), "OMP_NUM_THREADS": "1"}
    job = subprocess.run(
        ["sbatch", "--wait", "--nodes=1", f"--chdir={app}", "train.sbatch", "--steps", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = "\n".join(p.read_text() for p in (app / "logs").glob("mlstack-train-*.out"))
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n{out[-4000:]}"
    assert f"rendezvous {HOST}:29500" in out
    if python:
        steps = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert [s["step"] for s in steps] == [1, 2, 3]
        assert any((fsx / "checkpoints" / "mlstack-train").glob("step-3"))
    else:
        line = (prefix / "torchrun.log").read_text()
        assert "--nnodes=1" in line and f"--rdzv-endpoint={HOST}:29500" in line
        assert f"{app}/runtime/workloads/train.py --checkpoint-dir {fsx}/checkpoints/mlstack-train" in line


def test_a_worker_started_the_old_way_never_registers(cluster: dict[str, Any], tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(TODAYS_WORKER_CONF)
    # slurmd as the scripts started it before: no --conf-server, the six-line slurm.conf they wrote.
    done = subprocess.run(
        ["slurmd", "-D", "-s", "-f", str(conf), "-N", "p5-old"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0
    assert "p5-old" not in _run(["sinfo", "-h", "-N", "-o", "%N"], env=cluster["client"])
