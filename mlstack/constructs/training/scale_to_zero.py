"""`ScaleToZero`: a function that takes the training capacity to zero (EKS node groups, AWS Batch queues and
compute environments, SageMaker HyperPod instance groups) when invoked, by `CapacityBlockExpiry`'s rule or a
budget's notification topic. Handler: runtime/scale_to_zero."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, CfnResource, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack import resources
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import nag_id, skip_checkov, skip_guard_on_functions_outside_vpc
from mlstack.constructs.security.function_role import python_function

HANDLER_DIR = resources.runtime_path("scale_to_zero")


class ScaleToZero(Construct):
    """The function and its least-privilege role: DescribeNodegroup and UpdateNodegroupConfig on `nodegroups`
    only; ListJobs (no resource-level permission in AWS Batch) and TerminateJob on this account's jobs in this
    region when `job_queues` are given; UpdateComputeEnvironment on `compute_environments` only; DescribeCluster and
    UpdateCluster on `hyperpod_cluster_arn` only, with iam:PassRole of `hyperpod_execution_roles` to SageMaker
    (UpdateCluster passes each group's ExecutionRole again: SageMaker Developer Guide, "IAM users for cluster
    admin", which lists iam:PassRole for HyperPod cluster operations).

    Props (keyword; defaults in parentheses): `key` (required: its log group); `cluster_name` and `nodegroups` (none),
    `job_queues` and `compute_environments` (ARNs; none), `notify_topic` and `notify_key` (None: a topic told what
    was scaled, and the key it is encrypted with), `hyperpod_cluster_name` and `hyperpod_cluster_arn` (None),
    `hyperpod_groups` (instance group names to take to 0; none), `hyperpod_execution_roles` (ARNs of the groups'
    execution roles; none), `failure_topic` (None: no alarm; else an alarm on the function's Errors, any failed
    invocation in 5 minutes, timeouts and throttles of an attempt included, notifies it: the call that could not
    even publish what failed still reaches someone), `description`, `removal_policy` (`RETAINED`, the log group).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        cluster_name: str | None = None,
        nodegroups: Sequence[eks.Nodegroup] = (),
        job_queues: Sequence[str] = (),
        compute_environments: Sequence[str] = (),
        notify_topic: sns.ITopic | None = None,
        notify_key: kms.IKey | None = None,
        hyperpod_cluster_name: str | None = None,
        hyperpod_cluster_arn: str | None = None,
        hyperpod_groups: Sequence[str] = (),
        hyperpod_execution_roles: Sequence[str] = (),
        failure_topic: sns.ITopic | None = None,
        description: str = "scale the training capacity on an expiring Capacity Block to zero",
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        if nodegroups and cluster_name is None:
            raise ValueError("nodegroups need cluster_name (the EKS cluster they belong to)")
        if hyperpod_groups and (hyperpod_cluster_name is None or hyperpod_cluster_arn is None):
            raise ValueError("hyperpod_groups need hyperpod_cluster_name and hyperpod_cluster_arn")
        stack = Stack.of(self)
        self.log_group = logs.LogGroup(
            self, "LogGroup", encryption_key=key, retention=logs.RetentionDays.ONE_YEAR, removal_policy=removal_policy
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=description,
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[self.log_group.log_group_arn]
            )
        )
        if nodegroups:
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"],
                    resources=[n.nodegroup_arn for n in nodegroups],
                )
            )
        jobs = f"arn:{stack.partition}:batch:{stack.region}:{stack.account}:job/*"
        if job_queues:
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["batch:ListJobs"], resources=["*"]))
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["batch:TerminateJob"], resources=[jobs]))
        if compute_environments:
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["batch:UpdateComputeEnvironment"], resources=list(compute_environments))
            )
        if hyperpod_groups:
            assert hyperpod_cluster_arn is not None
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"], resources=[hyperpod_cluster_arn]
                )
            )
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=list(hyperpod_execution_roles),
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                )
            )
        self.function = python_function(
            self,
            "Function",
            code_dir=HANDLER_DIR,
            role=self.role,
            timeout=Duration.minutes(2),
            memory_size=256,
            log_group=self.log_group,
            environment={
                "CLUSTER_NAME": cluster_name or "",
                "NODEGROUPS": stack.to_json_string([n.nodegroup_name for n in nodegroups]),
                "JOB_QUEUES": stack.to_json_string(list(job_queues)),
                "COMPUTE_ENVIRONMENTS": stack.to_json_string(list(compute_environments)),
                **({"NOTIFY_TOPIC_ARN": notify_topic.topic_arn} if notify_topic is not None else {}),
                **(
                    {
                        "HYPERPOD_CLUSTER": hyperpod_cluster_name or "",
                        "HYPERPOD_GROUPS": stack.to_json_string(list(hyperpod_groups)),
                    }
                    if hyperpod_groups
                    else {}
                ),
            },
            description=description,
        )
        if notify_topic is not None:
            # Publishing to a topic encrypted with a customer-managed key takes GenerateDataKey and Decrypt on that
            # key (SNS Developer Guide, "Configure AWS KMS permissions": publishers to an encrypted topic).
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["sns:Publish"], resources=[notify_topic.topic_arn])
            )
            if notify_key is not None:
                self.role.add_to_principal_policy(
                    iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[notify_key.key_arn])
                )
        self.function.node.add_dependency(self.role)
        self.errors_alarm: cloudwatch.Alarm | None = None
        if failure_topic is not None:
            # Lambda's Errors metric counts invocations that ended in an error, timeouts included (Lambda Developer
            # Guide, "Types of metrics for Lambda functions"); the handler raises after publishing a failed step.
            self.errors_alarm = cloudwatch.Alarm(
                self,
                "ErrorsAlarm",
                metric=self.function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{description}: the function failed; read its log group and scale by hand",
            )
            self.errors_alarm.add_alarm_action(cw_actions.SnsAction(failure_topic))
        function = self.function.node.default_child
        assert isinstance(function, CfnResource)
        skip_guard_on_functions_outside_vpc(
            function,
            "calls only the EKS, AWS Batch and SageMaker control-plane APIs; it reaches nothing inside the VPC",
        )
        skip_checkov(
            function,
            {
                "CKV_AWS_117": "calls only the EKS, AWS Batch and SageMaker control-plane APIs; it reaches nothing in "
                "the VPC",
                "CKV_AWS_173": "the environment holds resource names and ARNs only, no secret",
                "CKV_AWS_45": "no secret in the environment: names and ARNs of this stack",
                "CKV_AWS_116": "invoked asynchronously by an EventBridge rule or an SNS topic, both of which retry "
                "delivery; the function's log records every call it made"
                + ("; its Errors alarm tells the alarm topic of a failed call" if failure_topic is not None else ""),
                "CKV_AWS_115": "no reserved concurrency on purpose: reserving any fails the deploy in accounts whose "
                "unreserved concurrency would fall below 100 (new accounts); every call is idempotent",
            },
        )
        if job_queues:
            Validations.of(self.role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM5[Resource::*]",
                    reason="batch:ListJobs has no resource-level permission (Service Authorization Reference, AWS "
                    "Batch actions)",
                )
            )
            Validations.of(self.role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{nag_id(stack, jobs)}]",
                    reason="job IDs exist only once a job is submitted: TerminateJob on this account's jobs in this "
                    "region",
                )
            )
