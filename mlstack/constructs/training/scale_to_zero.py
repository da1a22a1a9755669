"""`ScaleToZero`: a function that takes the training capacity to zero (EKS node groups, AWS Batch queues and
compute environments, SageMaker HyperPod instance groups, Karpenter NodePools) when invoked, by
`CapacityBlockExpiry`'s rule or a budget's notification topic. Handler: runtime/scale_to_zero."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from aws_cdk import Acknowledgment, CfnResource, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
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
from mlstack.constructs.training.kube_api_client import api_client_group

HANDLER_DIR = resources.runtime_path("scale_to_zero")
KARPENTER_GROUP = "karpenter.sh"
_VPC_POLICY = "service-role/AWSLambdaVPCAccessExecutionRole"


def pool_rbac(group: str, pools: Sequence[str]) -> list[dict[str, Any]]:
    """A ClusterRole with exactly what the handler's pool step sends (get and patch of the named NodePools, list
    and delete of NodeClaims, whose names Karpenter generates) and its binding to the Kubernetes `group` that the
    function's EKS access entry puts it in. Both named after the group (`:` -> `-`)."""
    name = group.replace(":", "-")
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [KARPENTER_GROUP],
                    "resources": ["nodepools"],
                    "resourceNames": list(pools),
                    "verbs": ["get", "patch"],
                },
                {"apiGroups": [KARPENTER_GROUP], "resources": ["nodeclaims"], "verbs": ["list", "delete"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        },
    ]


class ScaleToZero(Construct):
    """The function and its least-privilege role: DescribeNodegroup and UpdateNodegroupConfig on `nodegroups`
    only; ListJobs (no resource-level permission in AWS Batch) and TerminateJob on this account's jobs in this
    region when `job_queues` are given; UpdateComputeEnvironment on `compute_environments` only; DescribeCluster and
    UpdateCluster on `hyperpod_cluster_arn` only, with iam:PassRole of `hyperpod_execution_roles` to SageMaker
    (UpdateCluster passes each group's ExecutionRole again: SageMaker Developer Guide, "IAM users for cluster
    admin", which lists iam:PassRole for HyperPod cluster operations).

    With `pools` (Karpenter NodePool names of `pools_cluster`), the function runs in `pools_subnets` of the
    cluster's VPC with its own security group (HTTPS out: the private API endpoint, and the AWS APIs through the
    NAT gateway or the interface endpoints), admitted on 443 by the groups on the API endpoint
    (`api_client_group`), and AWSLambdaVPCAccessExecutionRole for its network interfaces. Kubernetes access: an EKS
    access entry (STANDARD, no access policy) that maps the role to `kubernetes_group`, and a ClusterRole +
    ClusterRoleBinding (`pool_rbac`) allowing get/patch of those pools and list/delete of NodeClaims, nothing else.

    Props (keyword; defaults in parentheses): `key` (required: its log group); `cluster_name` and `nodegroups` (none),
    `job_queues` and `compute_environments` (ARNs; none), `notify_topic` and `notify_key` (None: a topic told what
    was scaled, and the key it is encrypted with), `hyperpod_cluster_name` and `hyperpod_cluster_arn` (None),
    `hyperpod_groups` (instance group names to take to 0; none), `hyperpod_execution_roles` (ARNs of the groups'
    execution roles; none), `failure_topic` (None: no alarm; else an alarm on the function's Errors, any failed
    invocation in 5 minutes, timeouts and throttles of an attempt included, notifies it: the call that could not
    even publish what failed still reaches someone), `pools` (none), `pools_cluster` (None; required with pools),
    `pools_subnets` (none; required with pools: private subnets of the cluster's VPC), `kubernetes_group`
    ("mlstack:scale-to-zero"), `description`, `removal_policy` (`RETAINED`, the log group).
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
        pools: Sequence[str] = (),
        pools_cluster: eks.Cluster | None = None,
        pools_subnets: Sequence[ec2.ISubnet] = (),
        kubernetes_group: str = "mlstack:scale-to-zero",
        description: str = "scale the training capacity on an expiring Capacity Block to zero",
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        if nodegroups and cluster_name is None:
            raise ValueError("nodegroups need cluster_name (the EKS cluster they belong to)")
        if hyperpod_groups and (hyperpod_cluster_name is None or hyperpod_cluster_arn is None):
            raise ValueError("hyperpod_groups need hyperpod_cluster_name and hyperpod_cluster_arn")
        if pools and (pools_cluster is None or cluster_name is None or not pools_subnets):
            raise ValueError("pools need pools_cluster, cluster_name and pools_subnets (the cluster's private subnets)")
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
        self.security_group: ec2.SecurityGroup | None = None
        self.api_ingress: list[ec2.CfnSecurityGroupIngress] = []
        network: dict[str, Any] = {}
        kube: dict[str, str] = {}
        if pools:
            assert pools_cluster is not None
            self.security_group, self.api_ingress = api_client_group(
                self,
                cluster=pools_cluster,
                description="budget scale-to-zero: no inbound; HTTPS out to the EKS API and AWS APIs",
                egress_description="HTTPS: EKS API (Karpenter pools), SNS and the EKS/SageMaker APIs",
                ingress_description="the scale-to-zero function patches Karpenter NodePools",
            )
            self.role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(_VPC_POLICY))
            network = {
                "vpc": pools_cluster.vpc,
                "vpc_subnets": ec2.SubnetSelection(subnets=list(pools_subnets)),
                "security_groups": [self.security_group],
            }
            kube = {
                "NODEPOOLS": stack.to_json_string(list(pools)),
                "KUBE_ENDPOINT": pools_cluster.cluster_endpoint,
                "KUBE_CA": pools_cluster.cluster_certificate_authority_data,
            }
        self.function = python_function(
            self,
            "Function",
            code_dir=HANDLER_DIR,
            role=self.role,
            timeout=Duration.minutes(2),
            memory_size=256,
            log_group=self.log_group,
            **network,
            environment={
                **kube,
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
        self.access_entry: eks.CfnAccessEntry | None = None
        self.rbac: eks.KubernetesManifest | None = None
        if pools:
            assert pools_cluster is not None
            # No access policy: the Kubernetes group gets only what the ClusterRole below grants (EKS User Guide,
            # "Create access entries": kubernetesGroups bound by RoleBindings or ClusterRoleBindings).
            self.access_entry = eks.CfnAccessEntry(
                self,
                "AccessEntry",
                cluster_name=pools_cluster.cluster_name,
                principal_arn=self.role.role_arn,
                type="STANDARD",
                kubernetes_groups=[kubernetes_group],
            )
            self.rbac = eks.KubernetesManifest(
                self,
                "Rbac",
                cluster=cast(eks.ICluster, pools_cluster),
                manifest=pool_rbac(kubernetes_group, pools),
            )
            Validations.of(self.role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{_VPC_POLICY}]",
                    reason="the managed policy Lambda needs for a function in a VPC (its network interfaces)",
                )
            )
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
        if not pools:
            skip_guard_on_functions_outside_vpc(
                function,
                "calls only the EKS, AWS Batch and SageMaker control-plane APIs; it reaches nothing inside the VPC",
            )
        outside = {
            "CKV_AWS_117": "calls only the EKS, AWS Batch and SageMaker control-plane APIs; it reaches nothing in "
            "the VPC",
        }
        skip_checkov(
            function,
            {
                **({} if pools else outside),
                "CKV_AWS_173": "the environment holds resource names and ARNs only, no secret"
                if not pools
                else "the environment holds resource names, ARNs, the API endpoint and the cluster's public CA "
                "certificate, no secret",
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
