"""What the CloudWatch agent on an engine's GPU hosts (Batch container instances, HyperPod nodes, EKS managed and
Karpenter nodes) may call: `cloudwatch:PutMetricData` in its own namespace only, and a stream of its own in the
kernel-log group; and the user-data shell part that installs it on an EKS node.

The agent's log pusher calls CreateLogStream and PutLogEvents (CreateLogGroup only when the group is missing, which
the stack prevents; DescribeLogGroups and PutRetentionPolicy only for a `retention_in_days` the configuration does
not set): amazon-cloudwatch-agent plugins/outputs/cloudwatchlogs/internal/pusher. CloudWatch User Guide, "Create
IAM roles and users for use with the CloudWatch agent", and the `cloudwatch:namespace` condition key
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Aws, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from mlstack import resources
from mlstack.constructs.training.metric_names import HostAgent

HOST_AGENT_SCRIPT = resources.runtime_path("host_metrics", "install_cloudwatch_agent.sh")
HOST_AGENT_FILES = ("install_cloudwatch_agent.sh", "cloudwatch_agent.json")
"""The script and the agent's configuration as a HyperPod lifecycle prefix holds them (on_create.sh runs the
script when both are there)."""


def user_data_installer() -> str:
    """The installer as user data carries it (Batch's MIME part, EKS nodes' shell part): without its comment lines,
    which are a third of it, because EC2 takes 16 KB of user data (EC2 User Guide, "Run commands when you launch an
    EC2 instance with user data input") and the node's own parts share it. No line of its here-documents starts
    with `#` (tests/training/test_host_agent_failures.py runs this text), so only comments go."""
    lines = HOST_AGENT_SCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    return lines[0] + "".join(line for line in lines[1:] if not line.lstrip().startswith("#"))


AGENT_DIR = "/etc/mlstack"
"""Where an EKS node's user data writes the agent's configuration and installer."""


def _here_document(path: str, text: str, delimiter: str) -> str:
    if any(line == delimiter for line in text.splitlines()):
        raise ValueError(f"{path}: the text must not hold a line {delimiter} (the here-document delimiter)")
    return f"cat >{path} <<'{delimiter}'\n" + text.rstrip("\n") + f"\n{delimiter}\n"


def host_agent_shell(agent: HostAgent) -> str:
    """A bash script that writes the agent's configuration and installer to `AGENT_DIR` and runs the installer:
    the body of a `text/x-shellscript` MIME part, which cloud-init runs once, on the first boot (EKS nodes' user
    data). A failure costs the metrics, never the node (as HyperPod's on_create does)."""
    config = f"{AGENT_DIR}/cloudwatch_agent.json"
    script = f"{AGENT_DIR}/install_cloudwatch_agent.sh"
    return "".join(
        [
            "#!/bin/bash\n",
            f"mkdir -p {AGENT_DIR}\n",
            _here_document(config, agent.config, "MLSTACK_AGENT_CONFIG"),
            _here_document(script, user_data_installer(), "MLSTACK_AGENT_INSTALLER"),
            # Off cloud-init's path and after the driver: on the AL2023 NVIDIA AMIs the kernel module is loaded at
            # each boot by nvidia-kmod-load.service, which nothing orders before cloud-final (the user data), so
            # `nvidia-smi -L` could fail there and the installer skip the node (awslabs/amazon-eks-ami#2733); and
            # kubelet (nodeadm-run) starts after cloud-final, so an inline install would delay the node's join.
            # The transient unit starts after the driver's unit (ignored where there is none) and waits for the
            # GPUs up to 5 minutes.
            "systemd-run --no-block --unit=mlstack-host-agent --property=After=nvidia-kmod-load.service "
            f"/bin/bash -c 'for _ in $(seq 60); do nvidia-smi -L >/dev/null 2>&1 && break; sleep 5; done; "
            f"bash {script} {config} || "
            """echo "[mlstack] CloudWatch agent not started: no GPU metrics from this node"'\n""",
        ]
    )


def host_agent_statements(agent: HostAgent) -> list[iam.PolicyStatement]:
    group = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{agent.kernel_log_group_name}"
    return [
        iam.PolicyStatement(
            sid="HostAgentMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],  # PutMetricData has no resource type; the namespace condition bounds it
            conditions={"StringEquals": {"cloudwatch:namespace": agent.namespace}},
        ),
        iam.PolicyStatement(
            sid="HostAgentKernelLog",
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[f"{group}:log-stream:*"],
        ),
    ]


def acknowledge_host_agent(policy_owner: IConstruct, agent: HostAgent) -> None:
    """cdk-nag IAM5 on the two wildcards of `host_agent_statements`, with the bound a reviewer can check."""
    group = f"arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:{agent.kernel_log_group_name}"
    for resource, reason in (
        ("*", f"cloudwatch:PutMetricData has no resource type; the statement allows namespace {agent.namespace} only"),
        (
            f"{group}:log-stream:*",
            "the agent names its stream after the host ({hostname}); only streams of this one log group",
        ),
    ):
        Validations.of(policy_owner).acknowledge(
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{resource}]", reason=reason)
        )
