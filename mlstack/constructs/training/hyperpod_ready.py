"""`HyperPodAutoscalingReady`: a custom resource that completes once a HyperPod cluster's autoscaling is InService.

HyperPod installs its managed Karpenter and the HyperpodNodeClass CRD only when DescribeCluster's
`AutoScaling.Status` is InService ("Create a NodeClass", SageMaker HyperPod docs), some time after the
AWS::SageMaker::Cluster resource itself is complete; CDK's kubectl apply handler fails a manifest of an unknown kind
at once (it retries only `i/o timeout`). A manifest of HyperpodNodeClasses depends on `resource`. Handler:
runtime/hyperpod_ready (`on_event` names the resource, `is_complete` polls DescribeCluster), run by CDK's Provider
framework, whose waiter (a Step Functions state machine) calls `is_complete` every `query_interval` until
`total_timeout`.

Usable from any CDK app::

    ready = HyperPodAutoscalingReady(stack, "AutoscalingReady", cluster_name=hp.cluster_name,
                                     cluster_arn=hp.cluster_arn, key=key)
    manifest.node.add_dependency(ready.resource)
"""

from __future__ import annotations

from aws_cdk import CfnResource, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct, IConstruct

from mlstack import resources
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import acknowledge_nag, skip_checkov, skip_guard, skip_guard_on_functions_outside_vpc
from mlstack.constructs.security.function_role import function_role_and_logs, python_function

HANDLER_DIR = resources.runtime_path("hyperpod_ready")
RESOURCE_TYPE = "Custom::HyperPodAutoscalingReady"
QUERY_INTERVAL = Duration.minutes(1)
TOTAL_TIMEOUT = Duration.minutes(45)
SERVICE_TIMEOUT_MINUTES = 60
"""CloudFormation waits at most an hour for a custom resource (AWS::CloudFormation::CustomResource ServiceTimeout,
1-3600 seconds): the waiter's total timeout plus the provider's own calls must end within it."""
_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy"


class HyperPodAutoscalingReady(Construct):
    """Completes when the HyperPod cluster `cluster_name` (ARN `cluster_arn`) reports `AutoScaling.Status`
    InService; fails the deploy with the service's message when it reports Failed, or after `total_timeout`.

    The handler's role may call sagemaker:DescribeCluster on `cluster_arn` only and write its own log group
    (encrypted with `key`). The handler runs outside the VPC: it calls the SageMaker API only.

    Props (keyword; defaults in parentheses): `cluster_name`, `cluster_arn` (the cluster's attribute: the wait
    follows the cluster's creation), `key` (required); `query_interval` (1 minute);
    `total_timeout` (45 minutes, at most 55: HyperPod publishes no duration for its autoscaling setup;
    the custom resource's ServiceTimeout is 5 minutes more, and CloudFormation allows at most 60);
    `removal_policy` (`RETAINED`, of the log groups).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_arn: str,
        key: kms.IKey,
        query_interval: Duration = QUERY_INTERVAL,
        total_timeout: Duration = TOTAL_TIMEOUT,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        if total_timeout.to_minutes() > SERVICE_TIMEOUT_MINUTES - 5:
            raise ValueError(
                f"total_timeout: {total_timeout.to_minutes()} minutes is more than the {SERVICE_TIMEOUT_MINUTES - 5} "
                "a custom resource's one-hour ServiceTimeout leaves; shorten it"
            )
        stack = Stack.of(self)
        self.log_group, self.role = function_role_and_logs(
            self,
            log_group_id="HandlerLogs",
            role_id="Role",
            description="waits for HyperPod autoscaling: sagemaker:DescribeCluster on one cluster",
            key=key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=removal_policy,
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:DescribeCluster"], resources=[cluster_arn])
        )
        self.function, self.check = (
            python_function(
                self,
                construct_id,
                code_dir=HANDLER_DIR,
                handler=f"handler.{entry}",
                role=self.role,
                timeout=Duration.minutes(1),
                memory_size=128,
                log_group=self.log_group,
                environment={"HYPERPOD_CLUSTER": cluster_name},
                description=description,
            )
            for construct_id, entry, description in (
                ("Function", "on_event", "names the HyperPod autoscaling wait"),
                ("Check", "is_complete", "DescribeCluster: is the HyperPod cluster's autoscaling InService"),
            )
        )
        for fn in (self.function, self.check):
            fn.node.add_dependency(self.role)
        provider_logs = logs.LogGroup(
            self,
            "ProviderLogs",
            encryption_key=key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=removal_policy,
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.function,
            is_complete_handler=self.check,
            query_interval=query_interval,
            total_timeout=total_timeout,
            log_group=provider_logs,
        )
        self.resource = CustomResource(
            self,
            "Wait",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            # Without it CloudFormation waits its one-hour default for a provider that gave up earlier.
            service_timeout=Duration.minutes(total_timeout.to_minutes() + 5),
            properties={"ClusterArn": cluster_arn},
        )
        self._acknowledge(stack)

    def _acknowledge(self, stack: Stack) -> None:
        skip_guard_on_functions_outside_vpc(self, "calls only the SageMaker and Lambda APIs at deploy time")
        for fn in (self.function, self.check):
            skip_checkov(
                fn,
                {
                    "CKV_AWS_115": "runs only while CloudFormation creates or updates this wait; reserved "
                    "concurrency would only take capacity from the account pool",
                    "CKV_AWS_116": "invoked synchronously by CDK's provider framework, which fails the stack "
                    "operation on an error; a DLQ only receives failed asynchronous events",
                    "CKV_AWS_117": "calls only the SageMaker API (DescribeCluster); it reaches nothing in the VPC",
                    "CKV_AWS_173": "its environment holds the cluster's name only, no secret",
                },
            )
        # The user functions, and the framework's isComplete and onTimeout functions the waiter invokes.
        invoked: list[IConstruct] = [self.function, self.check]
        invoked += [self.provider.node.find_child(f"framework-{n}") for n in ("isComplete", "onTimeout")]
        ids = [stack.get_logical_id(fn.node.default_child) for fn in invoked]  # type: ignore[arg-type]
        reasons = {
            f"AwsSolutions-IAM4[{_MANAGED}/service-role/AWSLambdaBasicExecutionRole]": (
                "CDK's custom-resource provider functions: CloudWatch Logs for their own log streams only"
            ),
            **{
                f"AwsSolutions-IAM5[Resource::<{fn_id}.Arn>:*]": (
                    "the provider framework invokes versions/aliases of this construct's two handler functions only"
                )
                for fn_id in ids
            },
            "AwsSolutions-L1": "runtime of CDK's generated provider functions is fixed by aws-cdk-lib",
            "AwsSolutions-SF1": "CDK's waiter state machine only loops the isComplete handler; each check logs the "
            "cluster's AutoScaling.Status to the handler's log group, and a failure reaches the stack's events",
            "AwsSolutions-SF2": "CDK's waiter state machine makes one DescribeCluster call a minute for one deploy; "
            "no request path to trace",
        }
        acknowledge_nag(self.provider, reasons)
        machine = self.provider.node.find_child("waiter-state-machine").node.default_child
        assert isinstance(machine, CfnResource)
        skip_guard(
            machine,
            {
                "CT.STEPFUNCTIONS.PR.1": "CDK's waiter state machine only loops the isComplete handler, which logs "
                "each check to its own log group; a failure reaches the stack's events",
                "CT.STEPFUNCTIONS.PR.2": "CDK's waiter state machine makes one DescribeCluster call a minute for one "
                "deploy; no request path to trace",
            },
        )
        for child in self.provider.node.find_all():
            if isinstance(child, lambda_.CfnFunction):
                skip_checkov(
                    child,
                    {
                        "CKV_AWS_115": "CDK's provider function runs only during this wait's stack operations",
                        "CKV_AWS_116": "invoked by CloudFormation or the waiter; a failure is reported to the stack",
                        "CKV_AWS_117": "calls only the Lambda, Step Functions and CloudFormation response APIs",
                        "CKV_AWS_173": "its environment names the handler functions only (written by aws-cdk-lib)",
                    },
                )
