"""What the CloudWatch agent on an engine's own hosts (Batch container instances, HyperPod Slurm nodes) may call:
`cloudwatch:PutMetricData` in its own namespace only, and a stream of its own in the kernel-log group.

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
