"""What `TrainingCluster` adds around the EKS cluster: the kubectl layer of each Kubernetes version, add-on Pod
Identity roles, the hardening and scanner acknowledgements of the resources aws_eks_v2 generates (its kubectl
provider, the cluster role), the system nodes' settings (`SystemNodes`) and the control-plane log types."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jsii
from aws_cdk import Acknowledgment, IStableAnyProducer, RemovalPolicy, Stack, Validations
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack.catalog import InstanceType
from mlstack.constructs.common import pascal_id
from mlstack.constructs.scanners import skip_checkov, skip_guard
from mlstack.constructs.training import versions
from mlstack.constructs.training.efa import EfaNetworking


class _KubectlLayer:
    """`KubectlV<minor>Layer`, imported on first use: each package's import loads a 37 MB jsii tarball into the
    kernel (read and hashed on every synth), so a synth loads only the versions its clusters run."""

    def __init__(self, minor: int) -> None:
        self.__name__ = f"KubectlV{minor}Layer"
        self.module = f"aws_cdk.lambda_layer_kubectl_v{minor}"

    def __call__(self, scope: Construct, construct_id: str) -> lambda_.LayerVersion:
        layer: lambda_.LayerVersion = getattr(importlib.import_module(self.module), self.__name__)(scope, construct_id)
        return layer


KUBECTL_LAYERS: dict[str, _KubectlLayer] = {f"1.{minor}": _KubectlLayer(minor) for minor in (34, 35, 36)}
"""The kubectl Lambda layer of each Kubernetes version the cluster can run: kubectl and the cluster keep the same
minor version (kubectl supports one minor version of skew, Kubernetes version skew policy), one PyPI package per
minor (`aws-cdk.lambda-layer-kubectl-v34` ...)."""


def tolerate(*keys: str) -> list[dict[str, str]]:
    """Kubernetes tolerations of the NoSchedule taints `keys`, whatever their value."""
    return [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in keys]


def on_label(key: str, values: Sequence[str]) -> dict[str, Any]:
    """A pod affinity that requires a node label `key` with one of `values`."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]
            }
        }
    }


@dataclass(frozen=True)
class AcceleratorPool:
    """Accelerated nodes the cluster does not launch itself (a Karpenter NodePool): what the device plugins, the node
    agents' tolerations and a file system's security group need to know of them."""

    name: str
    instances: tuple[InstanceType, ...]
    efa: EfaNetworking | None


@jsii.implements(IStableAnyProducer)
class Produce:
    """A value computed at synth time, once every node group has been added (`Lazy.any`)."""

    def __init__(self, produce: Callable[[], Any]) -> None:
        self._produce = produce

    def produce(self) -> Any:
        return self._produce()


def addon_id(name: str) -> str:
    """The construct ID of a managed add-on (`vpc-cni` -> `VpcCniAddon`)."""
    return pascal_id(name) + "Addon"


def vpc_cni_pod_identity(scope: Construct, addon: eks.Addon) -> iam.Role:
    """The VPC CNI (aws-node) gets AmazonEKS_CNI_Policy through its own EKS Pod Identity role, not the node role:
    what a pod reads from instance metadata then carries no ENI or IP permissions (EKS User Guide, "Configure
    Amazon VPC CNI plugin to use IRSA": remove the policy from the node role)."""
    role = iam.Role(
        scope,
        "VpcCniRole",
        description="EKS Pod Identity role of the vpc-cni add-on (aws-node service account)",
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKS_CNI_Policy")],
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKS_CNI_Policy]",
            reason="the policy the VPC CNI needs to manage ENIs and pod IPs (EKS User Guide); only the aws-node "
            "service account can assume this role (Pod Identity association on the add-on)",
        )
    )
    cfn = addon.node.default_child
    assert isinstance(cfn, eks.CfnAddon)
    cfn.add_property_override(
        "PodIdentityAssociations", [{"ServiceAccount": versions.VPC_CNI_SERVICE_ACCOUNT, "RoleArn": role.role_arn}]
    )
    return role


def cloudwatch_observability(
    scope: Construct, cluster: eks.Cluster, *, pod_identity_agent: eks.Addon, system_nodes: eks.Nodegroup
) -> tuple[eks.Addon, iam.Role]:
    """The amazon-cloudwatch-observability add-on, its agent's Pod Identity role and association.

    The add-on's Fluent Bit and agent create their CloudWatch log groups themselves (/aws/containerinsights/
    <cluster>/application, dataplane, host, performance): they are not CloudFormation resources, so CDK sets
    neither their retention nor their encryption, and they remain after the stack is deleted.

    Its DCGM exporter is turned off (`cloudwatch_observability_values`): the node monitoring agent runs the GPU
    node's one DCGM host engine. The Neuron monitor stays; it schedules by the add-on's own instance-type allow-list.
    """
    role = iam.Role(
        scope,
        "CloudWatchAgentRole",
        description="EKS Pod Identity role of the amazon-cloudwatch-observability add-on's CloudWatch agent",
        # EKS Pod Identity trust: the service principal needs sts:AssumeRole and sts:TagSession (EKS User Guide,
        # "Create a Pod Identity association").
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("CloudWatchAgentServerPolicy")],
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/CloudWatchAgentServerPolicy]",
            reason="the policy the CloudWatch User Guide prescribes for the amazon-cloudwatch-observability "
            "add-on's agent (Container Insights quick start); only the add-on's cloudwatch-agent service account "
            "can assume this role (Pod Identity association)",
        )
    )
    # Fluent Bit runs under the same service account as the agent (chart fluent-bit-daemonset.yaml), so this one
    # association covers metrics and logs.
    association = eks.CfnPodIdentityAssociation(
        scope,
        "CloudWatchAgentPodIdentity",
        cluster_name=cluster.cluster_name,
        namespace=versions.CLOUDWATCH_NAMESPACE,
        service_account=versions.CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
        role_arn=role.role_arn,
    )
    # The Pod Identity agent injects credentials when a pod starts: the association must exist before the
    # agent's pods do.
    association.node.add_dependency(pod_identity_agent)
    addon = eks.Addon(
        scope,
        addon_id(versions.CLOUDWATCH_OBSERVABILITY),
        cluster=cast(eks.ICluster, cluster),
        addon_name=versions.CLOUDWATCH_OBSERVABILITY,
        addon_version=versions.ADDONS[versions.CLOUDWATCH_OBSERVABILITY],
        configuration_values=cloudwatch_observability_values(),
    )
    addon.node.add_dependency(system_nodes)
    addon.node.add_dependency(association)
    return addon, role


def cloudwatch_observability_values() -> dict[str, Any]:
    """Configuration values of the amazon-cloudwatch-observability add-on.

    - `dcgmExporter.enabled: false`: one DCGM host engine per GPU node. The node monitoring agent's `dcgm-server`
      DaemonSet runs `nv-hostengine`, whose health its agent turns into the AcceleratedHardwareReady condition that
      node auto repair acts on; the add-on's DCGM exporter would start a second, embedded host engine on the same
      GPUs, and with two the agent reports healthy nodes unhealthy (aws/containers-roadmap#2763, #2555). The
      add-on's exporter cannot be pointed at the agent's engine (its DcgmExporter resource takes no arguments,
      chart template `dcgm-exporter-daemonset.yaml`), and the agent cannot use another engine than its own, so
      the exporter goes: Container Insights then has no per-GPU metrics; the flag exists from chart 4.2.x
      (aws-observability/helm-charts#190), older than the EKS default add-on version for Kubernetes >= 1.34
      [INFERRED: check with `aws eks describe-addon-configuration --addon-name amazon-cloudwatch-observability`].
    - Root-level `tolerations` apply to every workload of the add-on (agent, Fluent Bit, Neuron monitor) unless a
      component sets its own (chart values.yaml, `common.tolerations` helper). The chart's default is this
      catch-all; it is set here so the agents keep tolerating the accelerator taints (nvidia.com/gpu,
      aws.amazon.com/neuron, vpc.amazonaws.com/efa) should the default change. A list of just those three would
      replace the default and drop every other taint the agents tolerate today.
    """
    return {"tolerations": [{"operator": "Exists"}], "dcgmExporter": {"enabled": False}}


def acknowledge_generated(cluster: eks.Cluster) -> None:
    """cdk-nag findings on roles and functions that aws_eks_v2 generates (not configurable from here)."""
    managed = "Policy::arn:<AWS::Partition>:iam::aws:policy"
    Validations.of(cluster.role).acknowledge(
        Acknowledgment(
            id=f"AwsSolutions-IAM4[{managed}/AmazonEKSClusterPolicy]",
            reason="the EKS service role must carry AmazonEKSClusterPolicy (EKS User Guide, cluster IAM role)",
        )
    )
    provider = cluster.node.find_child("KubectlProvider")
    handler = provider.node.find_child("Handler")
    stack = Stack.of(cluster)
    handler_fn = handler.node.default_child
    assert handler_fn is not None
    ecr_public = (
        '{"Fn::If":["'
        + stack.get_logical_id(handler.node.find_child("HasEcrPublic"))  # type: ignore[arg-type]
        + '",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/'
        'AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
    )
    reasons = {
        f"AwsSolutions-IAM4[{managed}/service-role/AWSLambdaBasicExecutionRole]": (
            "CDK's kubectl provider functions: CloudWatch Logs for their own log streams only"
        ),
        f"AwsSolutions-IAM4[{managed}/service-role/AWSLambdaVPCAccessExecutionRole]": (
            "CDK's kubectl provider runs in the VPC to reach the private API endpoint; ENI management only"
        ),
        f"AwsSolutions-IAM4[{managed}/AmazonEC2ContainerRegistryReadOnly]": (
            "the kubectl handler pulls Helm charts from ECR OCI registries (read-only)"
        ),
        f"AwsSolutions-IAM4[Policy::{ecr_public}]": (
            "the kubectl handler pulls Helm charts from ECR Public (public.ecr.aws/neuron), read-only"
        ),
        "AwsSolutions-L1": "runtime of CDK's generated kubectl-provider function is fixed by aws-cdk-lib 2.275.0",
        f"AwsSolutions-IAM5[Resource::<{stack.get_logical_id(handler_fn)}.Arn>:*]": (  # type: ignore[arg-type]
            "the provider framework invokes versions/aliases of the kubectl handler function only"
        ),
    }
    for rule_id, reason in reasons.items():
        Validations.of(provider).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def secure_kubectl_provider(cluster: eks.Cluster, key: kms.IKey, removal_policy: RemovalPolicy) -> None:
    """CDK's kubectl-provider functions (the handler that runs kubectl/helm, and the provider framework's
    onEvent): their log groups get the project key and the cluster's `removal_policy` (aws_eks_v2 would retain
    them with `Retain`, even after a failed first create); the checkov findings CDK's code leaves open are skipped
    on each function with the reason."""
    provider = cluster.node.find_child("KubectlProvider")
    for fn in provider.node.find_all():
        if isinstance(fn, lambda_.CfnFunction):
            skip_guard(
                fn,
                {
                    "CT.LAMBDA.PR.3": "CDK's kubectl-provider function runs in the cluster's VPC subnets with the EKS "
                    "cluster security group, a Fn::GetAtt of the AWS::EKS::Cluster that the control's local-reference "
                    "check does not take for a security group",
                },
            )
    for child in provider.node.find_all():
        if isinstance(child, logs.CfnLogGroup):
            # The key policy lets CloudWatch Logs use the key for this account's log groups (NetworkStack).
            child.kms_key_id = key.key_arn
            child.apply_removal_policy(removal_policy)
        elif isinstance(child, lambda_.CfnFunction):
            skip_checkov(
                child,
                {
                    "CKV_AWS_115": "CDK's kubectl-provider function runs only when CloudFormation changes a "
                    "manifest, chart or patch of this stack; reserved concurrency would only take capacity from "
                    "the account pool",
                    "CKV_AWS_116": "invoked synchronously through the CloudFormation custom-resource provider, "
                    "which fails the stack operation on an error; a DLQ only receives failed asynchronous events",
                    "CKV_AWS_173": "its environment holds no secret (kubectl/helm paths and the regional STS "
                    "setting, written by aws-cdk-lib); Lambda encrypts it at rest with an AWS-owned key",
                },
            )


ALL_LOGS = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


@dataclass(frozen=True)
class SystemNodes:
    """The CPU node group for cluster services (CoreDNS, device-plugin controllers, the trainer operator).

    Defaults: two m7i.xlarge On-Demand nodes (CoreDNS keeps a replica on each), up to four, 50 GiB root volumes.
    """

    instance_type: str = "m7i.xlarge"
    desired_size: int = 2
    min_size: int = 2
    max_size: int = 4
    disk_size_gib: int = 50
