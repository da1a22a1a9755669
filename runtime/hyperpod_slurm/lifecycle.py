"""Logic of the HyperPod Slurm lifecycle scripts (called by on_create.sh; unit-tested in tests/runtime, run against
real Slurm daemons by `make test-slurm`).

HyperPod writes `resource_config.json` on every node (instance groups and the private IP of each instance) and
copies the S3 prefix, with `provisioning_parameters.json` that the stack wrote, next to this file. HyperPod runs
Slurm configless: its agent writes `slurm.conf` on the controller only, and `slurmd` on worker and login nodes
fetches the configuration from `slurmctld` (`slurmd --conf-server`, start_slurm.sh). So only the controller's
configuration is ever edited here, and a node without `slurm.conf` never gets one. Standard library only: it runs
on the HyperPod AMI's python3 before anything is installed.

Paths default to HyperPod's and can be moved for the tests: MLSTACK_SLURM_ETC (/opt/slurm/etc) and
MLSTACK_NODE_ADDRESS (this node's primary private IP).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROLES = ("controller", "login", "compute")
HEALTH_CHECK_INTERVAL_S = 300
SLURMDBD_PORT = 6819
"""slurmdbd's default DbdPort (slurmdbd.conf man page), which accounting.conf names."""
ACCOUNTING_CONF = "accounting.conf"
SLURM_ETC = "/opt/slurm/etc"
"""Where the HyperPod AMI keeps slurm.conf, accounting.conf and slurmdbd.conf (SageMaker HyperPod lifecycle
scripts, awslabs/awsome-distributed-training 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config)."""


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def slurm_etc() -> Path:
    return Path(os.environ.get("MLSTACK_SLURM_ETC", SLURM_ETC))


def group_addresses(resource_config: dict[str, Any], group_name: str) -> list[str]:
    """Private IPs of the instances of one instance group, in resource-config order."""
    for group in resource_config.get("InstanceGroups", []):
        if group.get("Name") == group_name:
            return [str(i["CustomerIpAddress"]) for i in group.get("Instances", []) if i.get("CustomerIpAddress")]
    return []


def node_role(resource_config: dict[str, Any], params: dict[str, Any], address: str) -> tuple[str, str]:
    """(role, instance group name) of the instance with private IP `address`; ValueError when it is not listed."""
    for group in resource_config.get("InstanceGroups", []):
        if any(i.get("CustomerIpAddress") == address for i in group.get("Instances", [])):
            name = str(group.get("Name"))
            if name == params.get("controller_group"):
                return "controller", name
            if name == params.get("login_group"):
                return "login", name
            return "compute", name
    raise ValueError(f"{address} is not an instance of any group in the resource config")


def fsx(params: dict[str, Any]) -> tuple[str, str, str]:
    """(DNS name, mount name, mount path) of the file system, or ('-', '-', '-') when the cluster has none."""
    dns, mount_name = params.get("fsx_dns_name"), params.get("fsx_mountname")
    if not dns or not mount_name:
        return "-", "-", "-"
    return str(dns), str(mount_name), str(params.get("fsx_mount_path") or "/fsx")


def update_conf(text: str, settings: dict[str, str]) -> str:
    """`text` (a slurm.conf) with each `Key=value` of `settings` set once: existing lines of those keys (also
    commented-out ones) are replaced in place, missing ones appended. Idempotent."""
    lines = text.splitlines()
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        key = line.lstrip("#").strip().split("=", 1)[0].strip()
        if "=" in line and key in settings:
            if key not in seen:
                out.append(f"{key}={settings[key]}")
                seen.add(key)
            continue
        out.append(line)
    out += [f"{key}={value}" for key, value in settings.items() if key not in seen]
    return "\n".join(out) + "\n"


def ensure_include(text: str, name: str) -> str:
    """`text` (a slurm.conf) with one `include <name>` line. Relative, so that slurmctld ships the file to the
    configless nodes with slurm.conf (Slurm "Configless Slurm": included files are sent too). Idempotent."""
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].lower() == "include" and Path(words[1]).name == name:
            return text if text.endswith("\n") else text + "\n"
    return (text if text.endswith("\n") or not text else text + "\n") + f"include {name}\n"


def accounting_conf(controller_address: str) -> str:
    """accounting.conf, the file slurm.conf includes for job accounting through slurmdbd on the controller: Linux
    process accounting, the slurmdbd port, and GPUs as a tracked resource (sacct/sreport show GPU hours)."""
    return "\n".join(
        [
            "# Written by mlstack's on_create.sh (setup_accounting.sh) on the controller; slurm.conf includes it.",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={controller_address}",
            f"AccountingStoragePort={SLURMDBD_PORT}",
            "AccountingStorageTRES=gres/gpu",
            "GresTypes=gpu",
            "",
        ]
    )


def health_check_settings(program: str) -> dict[str, str]:
    return {
        "HealthCheckProgram": program,
        "HealthCheckInterval": str(HEALTH_CHECK_INTERVAL_S),
        "HealthCheckNodeState": "ANY",
    }


def slurmdbd_conf(password: str) -> str:
    """slurmdbd.conf for a MariaDB on the controller itself."""
    return "\n".join(
        [
            "AuthType=auth/munge",
            "DbdHost=localhost",
            f"DbdPort={SLURMDBD_PORT}",
            "SlurmUser=slurm",
            "LogFile=/var/log/slurm/slurmdbd.log",
            "PidFile=/var/run/slurmdbd.pid",
            "StorageType=accounting_storage/mysql",
            "StorageHost=localhost",
            "StorageUser=slurm",
            f"StoragePass={password}",
            "StorageLoc=slurm_acct_db",
            "",
        ]
    )


def wait_for_slurm_conf(path: Path, controllers: Sequence[str], timeout_s: int = 300, sleep_s: int = 5) -> bool:
    """Controller only: HyperPod's agent writes slurm.conf there; True once it exists and names a controller, by
    address or by the EC2 host name the address gives (ip-10-3-0-10)."""
    names = [*controllers, *(f"ip-{ip.replace('.', '-')}" for ip in controllers)]
    attempts = max(1, timeout_s // sleep_s)
    for attempt in range(attempts):
        if path.exists() and any(name in path.read_text() for name in names):
            return True
        if attempt + 1 < attempts:  # no sleep after the last look
            time.sleep(sleep_s)
    return False


def own_address() -> str:
    """This node's primary private IP (the route to the VPC; no packet is sent); MLSTACK_NODE_ADDRESS overrides."""
    if os.environ.get("MLSTACK_NODE_ADDRESS"):
        return os.environ["MLSTACK_NODE_ADDRESS"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("10.255.255.254", 1))
        return str(sock.getsockname()[0])


def _edit_existing(conf: Path, edit: Any) -> int:
    """Rewrite an existing slurm.conf with `edit`; refuse to create one (configless nodes get theirs from slurmctld)."""
    if not conf.is_file():
        print(
            f"{conf} does not exist: only the controller has a slurm.conf (configless nodes fetch it from slurmctld)",
            file=sys.stderr,
        )
        return 1
    conf.write_text(edit(conf.read_text()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resource-config", default=os.environ.get("SAGEMAKER_RESOURCE_CONFIG_PATH", ""))
    parser.add_argument("--params", default=str(Path(__file__).with_name("provisioning_parameters.json")))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("role")
    sub.add_parser("fsx")
    sub.add_parser("controllers")
    sub.add_parser("wait-slurm-conf")
    dbd = sub.add_parser("slurmdbd-conf")
    dbd.add_argument("--password-file", required=True)
    acct = sub.add_parser("accounting-conf", help="write accounting.conf and include it from slurm.conf")
    acct.add_argument("--controller", required=True, metavar="ADDRESS")
    upd = sub.add_parser("update-slurm-conf", help="set keys in the controller's existing slurm.conf")
    upd.add_argument("--health-check", metavar="PROGRAM", required=True)
    args = parser.parse_args(argv)
    conf = slurm_etc() / "slurm.conf"

    if args.command == "slurmdbd-conf":
        sys.stdout.write(slurmdbd_conf(Path(args.password_file).read_text().strip()))
        return 0
    if args.command == "accounting-conf":
        if _edit_existing(conf, lambda text: ensure_include(text, ACCOUNTING_CONF)) != 0:
            return 1
        (conf.parent / ACCOUNTING_CONF).write_text(accounting_conf(args.controller))
        return 0
    if args.command == "update-slurm-conf":
        return _edit_existing(conf, lambda text: update_conf(text, health_check_settings(args.health_check)))
    params = load(args.params)
    if args.command == "fsx":
        print(*fsx(params))
        return 0
    resource_config = load(args.resource_config)
    controllers = group_addresses(resource_config, str(params.get("controller_group")))
    if args.command == "role":
        print(*node_role(resource_config, params, own_address()))
    elif args.command == "controllers":
        print(",".join(controllers))
    elif args.command == "wait-slurm-conf" and not wait_for_slurm_conf(conf, controllers):
        print(f"{conf} never named a controller ({', '.join(controllers)})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
