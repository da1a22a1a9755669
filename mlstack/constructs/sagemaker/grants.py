"""Permissions a SageMaker role needs when its containers run in a VPC and log to CloudWatch."""

from __future__ import annotations

import json
from collections.abc import Sequence

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from mlstack.constructs.scanners import acknowledge_nag, nag_id


def grant_vpc_and_logs(role: iam.Role, vpc: ec2.IVpc, *, log_groups: Sequence[str]) -> None:
    """ENIs in `vpc` only, /aws/sagemaker/<kind>* log groups, metrics in SageMaker namespaces.

    SageMaker creates the job's or endpoint's network interfaces with the role (SageMaker developer guide, "Give
    SageMaker AI access to resources in your Amazon VPC"); ec2:Describe* and PutMetricData take no resource ARN.
    """
    stack = Stack.of(role)
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="DescribeNetwork",
            actions=[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeDhcpOptions",
            ],
            resources=["*"],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EnisInThisVpc",
            actions=[
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
            ],
            resources=["*"],
            conditions={"ArnEquals": {"ec2:Vpc": vpc.vpc_arn}},
        )
    )
    # Log-group ARNs take the colon form (arn:aws:logs:<region>:<account>:log-group:<name>); PutLogEvents is
    # authorised on the stream, <group ARN>:log-stream:<name> (Service Authorization Reference, "Actions, resources,
    # and condition keys for Amazon CloudWatch Logs").
    groups = [
        stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/sagemaker/{kind}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        for kind in log_groups
    ]
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SageMakerLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[*groups, *(f"{group}:log-stream:*" for group in groups)],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SageMakerMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/*", "aws/sagemaker/*"]}},
        )
    )


def grant_volume_key(role: iam.IRole, key: kms.IKey) -> None:
    """`role` may let SageMaker encrypt job or endpoint volumes with `key`: kms:CreateGrant for AWS resources through
    SageMaker only, and kms:DescribeKey.

    SageMaker creates a grant on the volume key with the caller's or the job's execution role when a request names
    `VolumeKmsKeyId` (CreateProcessingJob, CreateTrainingJob, monitoring jobs) or an endpoint config names `KmsKeyId`
    (CreateEndpoint, UpdateEndpoint): SageMaker Developer Guide, "Amazon SageMaker AI API Permissions: Actions,
    Permissions, and Resources Reference". Hosts with local NVMe take no volume key, so roles that only use those
    need no grant.
    """
    stack = Stack.of(role)
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="VolumeKeyGrantsThroughSageMaker",
            actions=["kms:CreateGrant"],
            resources=[key.key_arn],
            conditions={
                "Bool": {"kms:GrantIsForAWSResource": "true"},
                "StringEquals": {"kms:ViaService": f"sagemaker.{stack.region}.amazonaws.com"},
            },
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(sid="DescribeVolumeKey", actions=["kms:DescribeKey"], resources=[key.key_arn])
    )


def acknowledge_wildcards(role: iam.Role, reason: str) -> None:
    """Acknowledge each cdk-nag IAM5 finding of `role`'s default policy as it stands now, with `reason`.

    cdk-nag reports IAM5 per wildcard action and per wildcard resource (`AwsSolutions-IAM5[Action::kms:ReEncrypt*]`,
    `[Resource::<Bucket.Arn>/runs/*]`); an acknowledgement must name each one. Call it after the last grant.
    """
    policy = role.node.try_find_child("DefaultPolicy")
    if not isinstance(policy, iam.Policy):
        return
    stack = Stack.of(role)
    document = stack.resolve(policy.document.to_json())
    findings: set[str] = set()
    for statement in document.get("Statement", []):
        for action in _as_list(statement.get("Action")):
            if isinstance(action, str) and "*" in action:
                findings.add(f"Action::{action}")
        for resource in _as_list(statement.get("Resource")):
            if "*" not in json.dumps(resource):
                continue  # no finding; and cdk-nag's spelling of Fn::Sub (asset buckets) is not needed
            rendered = nag_id(stack, resource)
            if "*" in rendered:
                findings.add(f"Resource::{rendered}")
    acknowledge_nag(role, {f"AwsSolutions-IAM5[{finding}]": reason for finding in sorted(findings)})


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
