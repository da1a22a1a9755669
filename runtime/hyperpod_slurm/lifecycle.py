"""Logic of the HyperPod Slurm lifecycle scripts (called by on_create.sh; unit-tested in tests/runtime).

HyperPod writes `resource_config.json` on every node (instance groups and the private IP of each instance) and
copies the S3 prefix, with `provisioning_parameters.json` that the stack wrote, next to this file. Standard library
only: it runs on the HyperPod AMI's python3 before anything is installed.
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


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


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


def accounting_settings(controller_address: str) -> dict[str, str]:
    return {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStorageHost": controller_address,
        "JobAcctGatherType": "jobacct_gather/cgroup",
    }


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
    """HyperPod's agent writes slurm.conf; True once it names a controller (or when this node has none)."""
    for _ in range(max(1, timeout_s // sleep_s)):
        if not path.exists():
            return True
        if any(ip in path.read_text() for ip in controllers):
            return True
        time.sleep(sleep_s)
    return False


def own_address() -> str:
    """This node's primary private IP (the route to the VPC; no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("10.255.255.254", 1))
        return str(sock.getsockname()[0])


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
    upd = sub.add_parser("update-slurm-conf")
    upd.add_argument("--file", required=True)
    upd.add_argument("--accounting", metavar="CONTROLLER_ADDRESS")
    upd.add_argument("--health-check", metavar="PROGRAM")
    args = parser.parse_args(argv)

    if args.command == "slurmdbd-conf":
        sys.stdout.write(slurmdbd_conf(Path(args.password_file).read_text().strip()))
        return 0
    if args.command == "update-slurm-conf":
        settings: dict[str, str] = {}
        if args.accounting:
            settings.update(accounting_settings(args.accounting))
        if args.health_check:
            settings.update(health_check_settings(args.health_check))
        conf = Path(args.file)
        conf.write_text(update_conf(conf.read_text() if conf.exists() else "", settings))
        return 0
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
    elif args.command == "wait-slurm-conf":
        conf = Path(os.environ.get("SLURM_CONF", "/opt/slurm/etc/slurm.conf"))
        if not wait_for_slurm_conf(conf, controllers):
            print(f"{conf} never named a controller ({', '.join(controllers)})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
