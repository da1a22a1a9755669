"""`HyperPodDependencies`: the SageMaker HyperPod dependencies Helm chart, installed on an EKS cluster by the deploy.

HyperPod needs the chart (health-monitoring agent, deep health check, job auto-restart, Kubeflow training operator,
MPI operator, NVIDIA/Neuron/EFA device plugins) on the cluster before its nodes join. It exists only as a folder of
aws/sagemaker-hyperpod-cli whose sub-charts are local `file://` paths, so CDK's Helm handler (which pulls from a
chart repository) cannot install it, and the repository keeps no copy of it. Instead a custom resource runs
`runtime/hyperpod_chart/handler.py` in the VPC: it downloads the pinned commit's archive, checks the chart folder's
digest, runs `helm dependency update` and `helm upgrade --install`, as the SageMaker HyperPod docs ("Installing
packages on the Amazon EKS cluster using Helm") do by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Acknowledgment, CfnResource, CustomResource, Duration, RemovalPolicy, Size, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from mlstack import resources
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import skip_checkov, skip_guard
from mlstack.constructs.security.function_role import python_function
from mlstack.constructs.training import versions
from mlstack.constructs.training.admin_host import ADMIN_POLICY
from mlstack.constructs.training.kube_api_client import api_client_group

HANDLER_DIR = resources.runtime_path("hyperpod_chart")
RESOURCE_TYPE = "Custom::HyperPodDependencies"
_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy"


class HyperPodDependencies(Construct):
    """The HyperPod dependencies chart on `cluster`, installed (and upgraded, uninstalled) by CloudFormation.

    - A Lambda function in `subnets` (private, egress through NAT: github.com, the sub-charts' Helm repositories)
      with helm from `kubectl_layer`; its security group sends HTTPS only, and the cluster security group admits
      it on 443 (the private API endpoint). Its role has a cluster-admin EKS access entry (the chart creates CRDs,
      cluster roles and namespaces) and AWSLambdaVPCAccessExecutionRole; its logs are encrypted with `key`.
    - The custom resource `Install` (type `Custom::HyperPodDependencies`) carries the pins of `versions`: the
      archive URL of `HYPERPOD_CLI_COMMIT`, the chart path and `HYPERPOD_CHART_SHA256`, release
      `hyperpod-dependencies` in kube-system. A change of pin or values upgrades the release on the next deploy.
    - Depend on `install` from what needs the chart (the HyperPod cluster).

    Props (keyword): `cluster`, `kubectl_layer`, `subnets`, `key` (required); `values` (Helm values; default
    `global.region` of the stack, which the chart's agents use for their regional ECR images); `removal_policy`
    (`RETAINED`, of the two log groups).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        kubectl_layer: lambda_.ILayerVersion,
        subnets: Sequence[ec2.ISubnet],
        key: kms.IKey,
        values: Mapping[str, Any] | None = None,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.security_group, self.api_ingress = api_client_group(
            self,
            cluster=cluster,
            description="HyperPod chart installer: no inbound; HTTPS out to the EKS API, GitHub and Helm repositories",
            egress_description="HTTPS: EKS API, GitHub, charts",
            ingress_description="helm from the HyperPod chart installer",
        )
        self.role = iam.Role(
            self,
            "Role",
            description="HyperPod chart installer: VPC ENIs and its logs; cluster access from its EKS access entry",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            ],
        )
        # A year of the install's logs (a few lines per deploy): what the Control Tower log-retention control asks.
        self.log_group = logs.LogGroup(
            self, "Logs", encryption_key=key, retention=logs.RetentionDays.ONE_YEAR, removal_policy=removal_policy
        )
        self.function = python_function(
            self,
            "Function",
            description=f"helm upgrade --install {versions.HYPERPOD_CHART_RELEASE} from aws/sagemaker-hyperpod-cli",
            handler="handler.on_event",
            code_dir=HANDLER_DIR,
            arm64=False,
            layers=[kubectl_layer],
            role=self.role,
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            security_groups=[self.security_group],
            # Download (about 2 MB), `helm dependency update` (a few charts) and an install without --wait take
            # well under a minute; the margin is for slow registries.
            timeout=Duration.minutes(10),
            memory_size=1024,
            ephemeral_storage_size=Size.mebibytes(1024),
            log_group=self.log_group,
        )
        self.access_entry = eks.AccessEntry(
            self,
            "AccessEntry",
            cluster=cluster,  # type: ignore[arg-type]  # jsii stubs: Cluster lacks an ICluster member in typing only
            principal=self.role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)
            ],
        )
        provider_logs = logs.LogGroup(
            self,
            "ProviderLogs",
            encryption_key=key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=removal_policy,
        )
        self.provider = cr.Provider(self, "Provider", on_event_handler=self.function, log_group=provider_logs)
        framework = self.provider.node.find_child("framework-onEvent").node.default_child
        assert isinstance(framework, CfnResource)
        skip_guard(
            framework,
            {
                "CT.LAMBDA.PR.3": "CDK's custom-resource framework function only invokes the installer function (which "
                "runs in the VPC) and answers CloudFormation's pre-signed response URL; it reads no data",
            },
        )
        chart_values = dict(values) if values is not None else {"global": {"region": stack.region}}
        self.install = CustomResource(
            self,
            "Install",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties={
                "ClusterName": cluster.cluster_name,
                "Region": stack.region,
                "Endpoint": cluster.cluster_endpoint,
                "CertificateAuthority": cluster.cluster_certificate_authority_data,
                "ArchiveUrl": versions.HYPERPOD_CHART_ARCHIVE,
                "ChartPath": versions.HYPERPOD_CHART_PATH,
                "ChartSha256": versions.HYPERPOD_CHART_SHA256,
                "Release": versions.HYPERPOD_CHART_RELEASE,
                "Namespace": versions.HYPERPOD_CHART_NAMESPACE,
                "ValuesJson": stack.to_json_string(chart_values),
            },
        )
        # The function calls the API server as soon as it runs: its access entry and its way in must exist first.
        self.install.node.add_dependency(self.access_entry, *self.api_ingress)
        self._acknowledge(stack)

    def _acknowledge(self, stack: Stack) -> None:
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM4[{_MANAGED}/service-role/AWSLambdaVPCAccessExecutionRole]",
                reason="the managed policy Lambda needs for a function in a VPC (ENIs) and its own log streams",
            )
        )
        skip_checkov(
            self.function,
            {
                "CKV_AWS_115": "runs only when CloudFormation creates, updates or deletes this chart's release; "
                "reserved concurrency would only take capacity from the account pool",
                "CKV_AWS_116": "invoked synchronously by the custom-resource provider, which fails the stack "
                "operation on an error; a DLQ only receives failed asynchronous events",
                "CKV_AWS_173": "no environment variables",
            },
        )
        framework = self.provider.node.find_child("framework-onEvent")
        framework_fn = framework.node.default_child
        assert isinstance(framework_fn, lambda_.CfnFunction)
        fn_id = stack.get_logical_id(self.function.node.default_child)  # type: ignore[arg-type]
        reasons = {
            f"AwsSolutions-IAM4[{_MANAGED}/service-role/AWSLambdaBasicExecutionRole]": (
                "CDK's custom-resource provider function: CloudWatch Logs for its own log streams only"
            ),
            f"AwsSolutions-IAM5[Resource::<{fn_id}.Arn>:*]": (
                "the provider framework invokes versions/aliases of the installer function only"
            ),
            "AwsSolutions-L1": "runtime of CDK's generated provider function is fixed by aws-cdk-lib",
        }
        for rule_id, reason in reasons.items():
            Validations.of(self.provider).acknowledge(Acknowledgment(id=rule_id, reason=reason))
        skip_checkov(
            framework_fn,
            {
                "CKV_AWS_115": "CDK's provider function runs only during this chart's stack operations",
                "CKV_AWS_116": "invoked by CloudFormation; a failure is reported to the stack operation",
                "CKV_AWS_117": "calls only the Lambda API and the CloudFormation response URL; the installer it "
                "invokes is the function in the VPC",
                "CKV_AWS_173": "its environment names the installer function only (written by aws-cdk-lib)",
            },
        )
