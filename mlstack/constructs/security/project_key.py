"""`ProjectKey`: the customer-managed KMS key of a project and the key-policy statements AWS services need."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import skip_checkov, skip_guard, skip_iam_lint

LOGS_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*")
"""What CloudWatch Logs needs to encrypt a log group with a customer-managed key (CloudWatch Logs User Guide,
"Encrypt log data in CloudWatch Logs using AWS KMS", key policy example), less its `kms:Describe*`: the statement is
conditioned on the `kms:EncryptionContext:aws:logs:arn` key, which DescribeKey requests never carry, so under that
condition it never allowed anything (a condition key missing from the request does not match: IAM User Guide,
"IAM JSON policy elements: Condition operators"). AWS's own CloudWatchLogsAPIKeyAccess managed policy grants
DescribeKey in a statement of its own, without the encryption-context condition."""

EBS_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey")
"""What EC2 needs to create and attach encrypted volumes for the account's principals (the AWS-managed `aws/ebs`
key policy; EBS User Guide, "How Amazon EBS encryption works")."""


class ProjectKey(kms.Key):
    """A symmetric KMS key with rotation on, an alias, and the key-policy statements AWS services need.

    It is a `kms.Key` (same construct path as a plain key, so an existing key keeps its logical ID) whose policy is
    only ever extended through its own methods, called by the stack that owns it:

    - always: CloudWatch Logs may use the key for log groups of this account and region (flow logs, EKS control
      plane, Lambda functions);
    - `allow_ebs_through_ec2()`: EC2 (and EC2 Auto Scaling on behalf of the account) encrypts EBS volumes;
    - `allow_cloudwatch_alarms_to_sns()`: CloudWatch alarm actions publish to SNS topics encrypted with the key;
    - `allow_eventbridge_to_sns()`: EventBridge rules publish to SNS topics encrypted with the key;
    - `allow_budgets_to_sns()`: AWS Budgets notifications publish to SNS topics encrypted with the key;
    - `allow_service(...)`: a later layer's service principal, with the actions and conditions it needs.

    Each method adds its statements once, however often it is called.

    Props (keyword): `description` (required), `alias` (required, e.g. `alias/mlstack/<name>`), `removal_policy`
    (default `RETAINED`: deleting the stack must never destroy the key that encrypts data elsewhere),
    `pending_window` (default 30 days, the longest KMS allows: time to notice a scheduled deletion).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        alias: str,
        removal_policy: RemovalPolicy = RETAINED,
        pending_window: Duration | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description=description,
            enable_key_rotation=True,
            alias=alias,
            removal_policy=removal_policy,
            pending_window=pending_window or Duration.days(30),
        )
        self._added: set[str] = set()
        stack = Stack.of(self)
        logs_arn = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"
        self.allow_service(
            "AllowCloudWatchLogs",
            principal=iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com"),
            actions=LOGS_ACTIONS,
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": logs_arn}},
        )
        skip_iam_lint(
            self,
            {
                "MISMATCHED_TYPE Type mismatch: ArnLike requires a value of type Arn but given String": "the "
                "encryption-context key is typed String, yet CloudWatch Logs' key-policy example and AWS's "
                "CloudWatchLogsAPIKeyAccess managed policy match it with ArnLike; its value is a log-group ARN",
            },
        )
        skip_guard(
            self,
            {
                "CT.KMS.PR.3": "the grants this key must allow come from AWS services for AWS resources (EBS through "
                "EC2, SageMaker job and endpoint volumes); a deny on all others waits for `mlstack access` to "
                "show that no run-time call needs one (issue 22)",
            },
        )

    def allow_service(
        self,
        sid: str,
        *,
        principal: iam.IPrincipal,
        actions: tuple[str, ...],
        conditions: Mapping[str, Any] | None = None,
    ) -> None:
        """Let `principal` (an AWS service) use the key for `actions`, under `conditions`; once per `sid`."""
        if sid in self._added:
            return
        self._added.add(sid)
        self.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[principal],
                actions=list(actions),
                resources=["*"],
                conditions=dict(conditions) if conditions else None,
            )
        )

    def allow_ebs_through_ec2(self) -> None:
        """EC2 may encrypt EBS volumes with the key for this account's principals, EC2 Auto Scaling's service-linked
        role included (managed node groups launch through it; EC2 Auto Scaling User Guide, "Required AWS KMS key
        policy for use with encrypted volumes").

        Conditioned like the AWS-managed `aws/ebs` key policy (caller account + via EC2), so no principal has to
        exist when the policy is written."""
        if "AllowEbsThroughEc2" in self._added:
            return
        stack = Stack.of(self)
        conditions = {
            "StringEquals": {"kms:CallerAccount": stack.account, "kms:ViaService": f"ec2.{stack.region}.amazonaws.com"}
        }
        self.allow_service(
            "AllowEbsThroughEc2", principal=iam.AnyPrincipal(), actions=EBS_ACTIONS, conditions=conditions
        )
        skip_checkov(
            self,
            {
                "CKV_AWS_33": "the two statements with principal * (AllowEbsThroughEc2, AllowEbsGrantsThroughEc2) are "
                "bounded by kms:CallerAccount = this account and kms:ViaService = ec2.<region>, as in the AWS-managed "
                "aws/ebs key policy: EC2 Auto Scaling's service-linked role encrypts node volumes without being named",
            },
        )
        self.allow_service(
            "AllowEbsGrantsThroughEc2",
            principal=iam.AnyPrincipal(),
            actions=("kms:CreateGrant",),
            conditions={**conditions, "Bool": {"kms:GrantIsForAWSResource": "true"}},
        )

    def allow_eventbridge_to_sns(self) -> None:
        """EventBridge encrypts what a rule publishes to a topic encrypted with this key (SNS Developer Guide,
        "Configure AWS KMS permissions for AWS services"; EventBridge User Guide, "Amazon SNS permissions")."""
        self.allow_service(
            "AllowEventBridgeToEncryptedTopics",
            principal=iam.ServicePrincipal("events.amazonaws.com"),
            actions=("kms:Decrypt", "kms:GenerateDataKey*"),
        )

    def allow_cloudwatch_alarms_to_sns(self) -> None:
        """CloudWatch encrypts what an alarm action publishes to a topic encrypted with this key (SNS Developer
        Guide, "Configure AWS KMS permissions for AWS services")."""
        self.allow_service(
            "AllowCloudWatchAlarmsToEncryptedTopics",
            principal=iam.ServicePrincipal("cloudwatch.amazonaws.com"),
            actions=("kms:Decrypt", "kms:GenerateDataKey*"),
        )

    def allow_budgets_to_sns(self) -> None:
        """AWS Budgets encrypts what a budget notification publishes to a topic encrypted with this key (AWS Cost
        Management User Guide, "Creating an Amazon SNS topic for budget notifications": an encrypted topic's key
        lets budgets.amazonaws.com use kms:GenerateDataKey* and kms:Decrypt)."""
        self.allow_service(
            "AllowBudgetsToEncryptedTopics",
            principal=iam.ServicePrincipal("budgets.amazonaws.com"),
            actions=("kms:Decrypt", "kms:GenerateDataKey*"),
        )
