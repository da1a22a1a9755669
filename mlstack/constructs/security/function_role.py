"""A Lambda function's least-privilege start: its own encrypted log group and a role that may write to that group
only (instead of AWSLambdaBasicExecutionRole, which allows logs:* on every group). The caller adds the function's
own calls to the role and passes both to `python_function(role=..., log_group=...)`, the one way the project builds
a handler from a folder under runtime/."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
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


def python_function(
    scope: Construct,
    construct_id: str,
    *,
    code_dir: Path,
    handler: str = "handler.handler",
    exclude: Sequence[str] = (),
    arm64: bool = True,
    **props: Any,
) -> lambda_.Function:
    """A Python 3.14 function from `code_dir` (bytecode caches and `exclude` left out of the asset), on Graviton
    unless `arm64` is False (a layer built for x86_64, such as the kubectl layers); `props`: the rest of
    `lambda_.Function`'s (role, log group, timeout, memory, environment, description, ...)."""
    if arm64:
        props["architecture"] = lambda_.Architecture.ARM_64
    return lambda_.Function(
        scope,
        construct_id,
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler=handler,
        code=lambda_.Code.from_asset(str(code_dir), exclude=["__pycache__", "*.pyc", *exclude]),
        **props,
    )
