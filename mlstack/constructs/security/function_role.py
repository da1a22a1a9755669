"""A Lambda function's least-privilege start: its own encrypted log group and a role that may write to that group
only (instead of AWSLambdaBasicExecutionRole, which allows logs:* on every group). The caller adds the function's
own calls to the role and passes both to `lambda_.Function(role=..., log_group=...)`."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct


def function_role_and_logs(
    scope: Construct,
    *,
    log_group_id: str,
    role_id: str,
    description: str,
    key: kms.IKey,
    retention: logs.RetentionDays,
    removal_policy: RemovalPolicy,
) -> tuple[logs.LogGroup, iam.Role]:
    """The log group (encrypted with `key`) and the role (`description`), in that order, in `scope`."""
    log_group = logs.LogGroup(
        scope, log_group_id, encryption_key=key, retention=retention, removal_policy=removal_policy
    )
    role = iam.Role(scope, role_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn])
    )
    return log_group, role
