"""User data of the AWS Batch container instances: MIME multi-part (Batch merges it with its own part), one
shell part per step, so a failure in one step cannot skip another (cloud-init runs every part).

1. `runtime/batch/mount_fsx.sh`: FSx for Lustre at /fsx, with retries (only when the blueprint has FSx).
2. `runtime/batch/host_setup.sh`: the ECS agent's IMDS block for awsvpc containers, and the EFA software only
   where the AMI lacks it (`fi_info -p efa`).
3. `stop_timeout_part`: the ECS agent's container stop timeout (only when one is given).
4. `runtime/host_metrics/install_cloudwatch_agent.sh`: the CloudWatch agent with the stack's configuration (per-GPU
   and EFA metrics, the kernel log), only when `host_agent_config` is given; after the EFA software, whose
   devices its EFA input reads.
"""

from __future__ import annotations

from aws_cdk import Fn

from mlstack import resources
from mlstack.constructs.training.host_agent import user_data_installer

BOUNDARY = "==MLSTACK-BATCH=="
SCRIPTS_DIR = resources.runtime_path("batch")
MOUNT_FSX = SCRIPTS_DIR / "mount_fsx.sh"
HOST_SETUP = SCRIPTS_DIR / "host_setup.sh"
AGENT_CONFIG_PATH = "/etc/mlstack/cloudwatch-agent.json"


def _part(header_lines: list[str], script: str) -> list[str]:
    return [
        f"--{BOUNDARY}\n",
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n',
        "#!/bin/bash\n",
        *header_lines,
        script if script.endswith("\n") else script + "\n",
    ]


def stop_timeout_part(seconds: int) -> list[str]:
    """A MIME part that sets the ECS agent's ECS_CONTAINER_STOP_TIMEOUT to `seconds`.

    AWS Batch stops a job's container through ECS (TerminateJob on a STARTING or RUNNING job, a job timeout, a
    scale-down): the container gets SIGTERM, then SIGKILL after the agent's stop timeout, 30 s unless
    ECS_CONTAINER_STOP_TIMEOUT says otherwise (AWS Batch User Guide, "Job timeouts"; AWS HPC Blog, "Understanding the
    AWS Batch termination process"; Amazon ECS API Reference, StopTask). A Batch job definition has no stop timeout
    of its own, so the agent's setting is the container's window to checkpoint. The agent reads /etc/ecs/ecs.config
    when it starts, after cloud-init has run the user data (Amazon ECS Developer Guide, "Bootstrapping Amazon ECS
    Linux container instances with Amazon EC2 user data")."""
    if not 1 <= seconds <= 3600:
        raise ValueError(f"stop timeout {seconds}s: must be 1 to 3600 seconds")
    return _part([], f'echo "ECS_CONTAINER_STOP_TIMEOUT={seconds}s" >>/etc/ecs/ecs.config\n')


def user_data(
    *,
    fsx_path: str,
    fsx_dns_name: str | None,
    fsx_mount_name: str | None,
    stop_timeout_s: int | None = None,
    host_agent_config: str | None = None,
) -> str:
    """Base64 MIME multi-part user data; `fsx_dns_name`/`fsx_mount_name` may be tokens (None: no FSx part);
    `stop_timeout_s`: the ECS agent's container stop timeout (None: the agent's 30 s); `host_agent_config`: the
    CloudWatch agent's JSON configuration (None: no agent)."""
    parts: list[str] = ["MIME-Version: 1.0\n", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n']
    if fsx_dns_name is not None and fsx_mount_name is not None:
        header = ["FSX_DNS_NAME=", fsx_dns_name, "\nFSX_MOUNT_NAME=", fsx_mount_name, f"\nFSX_PATH={fsx_path}\n"]
        parts += _part(header, MOUNT_FSX.read_text(encoding="utf-8"))
    parts += _part([], HOST_SETUP.read_text(encoding="utf-8"))
    if stop_timeout_s is not None:
        parts += stop_timeout_part(stop_timeout_s)
    if host_agent_config is not None:
        if "MLSTACK_AGENT_CONFIG" in host_agent_config:
            raise ValueError("host_agent_config must not contain the here-document delimiter MLSTACK_AGENT_CONFIG")
        header = [
            f"mkdir -p {AGENT_CONFIG_PATH.rsplit('/', 1)[0]}\n",
            f"cat >{AGENT_CONFIG_PATH} <<'MLSTACK_AGENT_CONFIG'\n",
            host_agent_config.rstrip("\n") + "\n",
            "MLSTACK_AGENT_CONFIG\n",
            f'set -- "{AGENT_CONFIG_PATH}"\n',
        ]
        parts += _part(header, user_data_installer())
    parts.append(f"--{BOUNDARY}--\n")
    return Fn.base64(Fn.join("", parts))
