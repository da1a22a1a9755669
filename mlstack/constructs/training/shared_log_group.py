"""`SharedLogGroup`: a log group with a fixed name that another writer (Fluent Bit) may create before the stack,
made ready by a custom resource instead of owned as `AWS::Logs::LogGroup`. Handler: runtime/log_group."""

from __future__ import annotations

from aws_cdk import ArnFormat, CfnResource, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack import resources
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import acknowledge_nag, nag_id, skip_checkov, skip_guard_on_functions_outside_vpc
from mlstack.constructs.security.function_role import python_function

HANDLER_DIR = resources.runtime_path("log_group")
RESOURCE_TYPE = "Custom::SharedLogGroup"


class SharedLogGroup(Construct):
    """Log group `log_group_name`, created when missing and taken over when present (an `AWS::Logs::LogGroup` of
    the same name fails with "already exists" once the group's other writer created it), encrypted with `key` and
    keeping `retention_days` of logs. Deleting the stack leaves the group and its logs in place.

    The handler's role may call CreateLogGroup, AssociateKmsKey and PutRetentionPolicy on this one group, use
    `key` only through CloudWatch Logs (`kms:ViaService`), and write its own log group.

    Props (keyword; defaults in parentheses): `log_group_name`, `key` (required); `retention_days` (365, one of
    CloudWatch Logs' retention periods); `removal_policy` (`RETAINED`, the handler's own log group).

    `log_group` is the group by name, for metric filters: a construct that needs it to exist depends on `resource`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_group_name: str,
        key: kms.IKey,
        retention_days: int = 365,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        group_arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=log_group_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.handler_logs = logs.LogGroup(
            self,
            "HandlerLogs",
            encryption_key=key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=removal_policy,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"creates or takes over {log_group_name}: key and retention",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[self.handler_logs.log_group_arn]
            )
        )
        # The group's ARN with and without the `:*` suffix: CloudWatch Logs authorizes these calls on either form
        # (Service Authorization Reference, Amazon CloudWatch Logs: the log-group resource type).
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:AssociateKmsKey", "logs:PutRetentionPolicy"],
                resources=[group_arn, f"{group_arn}:*"],
            )
        )
        # CloudWatch Logs uses the key on the caller's behalf (CloudWatch Logs User Guide, "Encrypt log data in
        # CloudWatch Logs using AWS Key Management Service": kms:ViaService); through Logs only.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:DescribeKey", "kms:GenerateDataKey", "kms:Decrypt", "kms:Encrypt"],
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"logs.{stack.region}.amazonaws.com"}},
            )
        )
        acknowledge_nag(
            self.role,
            {
                f"AwsSolutions-IAM5[Resource::{nag_id(stack, group_arn)}:*]": "this one log group in the `:*` form "
                "CloudWatch Logs also authorizes its calls with (its log streams); no other group",
            },
        )
        self.function = python_function(
            self,
            "Function",
            code_dir=HANDLER_DIR,
            role=self.role,
            timeout=Duration.minutes(2),
            memory_size=128,
            log_group=self.handler_logs,
            description=f"creates or takes over {log_group_name}",
        )
        self.function.node.add_dependency(self.role)
        # Not "Resource": that ID would give the custom resource the logical ID an earlier AWS::Logs::LogGroup of
        # this construct had, and CloudFormation cannot change a resource's type in an update.
        self.resource = CustomResource(
            self,
            "Setup",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            # The function's 2-minute timeout plus retries: without it CloudFormation waits an hour for a response
            # that a killed invocation never sends (AWS::CloudFormation::CustomResource ServiceTimeout).
            service_timeout=Duration.minutes(5),
            properties={
                "LogGroupName": log_group_name,
                "KmsKeyArn": key.key_arn,
                "RetentionInDays": str(retention_days),
            },
        )
        self.log_group = logs.LogGroup.from_log_group_name(self, "LogGroup", log_group_name)
        function = self.function.node.default_child
        assert isinstance(function, CfnResource)
        skip_guard_on_functions_outside_vpc(function, "calls only the CloudWatch Logs API at deploy time")
        skip_checkov(
            function,
            {
                "CKV_AWS_117": "calls only the CloudWatch Logs API at deploy time; it reaches nothing in the VPC",
                "CKV_AWS_116": "a CloudFormation custom resource: CloudFormation invokes it asynchronously and a "
                "failed invocation is retried, then the stack fails after its 5-minute ServiceTimeout; nothing to keep",
                "CKV_AWS_115": "no reserved concurrency on purpose: reserving any fails the deploy in accounts whose "
                "unreserved concurrency would fall below 100 (new accounts); one call per deploy",
            },
        )
