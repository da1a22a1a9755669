"""`TrainingCluster`: the EKS control plane, system nodes, add-ons and Helm charts of a training cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct

from mlstack.config.base import pascal_id
from mlstack.config.training import TrainingConfig
from mlstack.constructs.network.ml_vpc import retention
from mlstack.constructs.scanners import skip_checkov
from mlstack.constructs.training import versions
from mlstack.constructs.training.node_group import acknowledge_node_role, taint_keys
from mlstack.k8s.kube import EFA_TAINT, GPU_TAINT, LABEL_PREFIX, NEURON_TAINT

ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
"""Add-ons every node group (system and accelerated) waits for: a node that starts first gets no pod IPs."""
AFTER_NODES = ("coredns", "aws-fsx-csi-driver", "eks-node-monitoring-agent")

_ALL_LOGS = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


def _tolerate(*keys: str) -> list[dict[str, str]]:
    return [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in keys]


def _on_label(key: str, values: Sequence[str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]
            }
        }
    }


class TrainingCluster(Construct):
    """An EKS cluster (aws_eks_v2) for training.

    - Private API endpoint by default, access entries for the blueprint's admins, all five control-plane log
      types, Kubernetes secrets encrypted with the project key.
    - A small system node group (AL2023, on-demand) for cluster services; accelerated groups are added by the
      caller with `AcceleratedNodeGroup`.
    - Managed add-ons: VPC CNI (EFA-only capable), kube-proxy, Pod Identity agent, CoreDNS, FSx CSI driver, the
      node monitoring agent (node conditions such as AcceleratedHardwareReady, used by node auto repair) and
      amazon-cloudwatch-observability: Container Insights, whose own DCGM exporter (NVIDIA) and Neuron monitor
      (Trainium/Inferentia) publish GPU/Neuron metrics to CloudWatch; its agent gets CloudWatchAgentServerPolicy
      through EKS Pod Identity.
    - Helm charts (versions in `versions.py`): NVIDIA or Neuron device plugin, the EFA device plugin tolerating
      the accelerator taints (its chart default tolerates none) and the Kubeflow Trainer operator. No
      standalone dcgm-exporter chart: a second DCGM exporter on the same GPUs would duplicate the add-on's.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        key: kms.IKey,
        config: TrainingConfig,
        cluster_name: str,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        cluster_config = config.cluster
        # EKS writes control-plane logs to /aws/eks/<name>/cluster and creates that group itself (no retention, no
        # key) unless it exists: create it first, so the stack owns its retention and encryption. That needs a
        # cluster name known before the cluster exists, hence the explicit name.
        self.log_group = logs.LogGroup(
            self,
            "ControlPlaneLogGroup",
            log_group_name=f"/aws/eks/{cluster_name}/cluster",
            retention=retention(cluster_config.log_retention_days),
            encryption_key=key,
            removal_policy=removal_policy,
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(cluster_config.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            endpoint_access=(
                eks.EndpointAccess.PRIVATE
                if cluster_config.endpoint_access == "private"
                else eks.EndpointAccess.PUBLIC_AND_PRIVATE
            ),
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_self_managed_addons=False,
            cluster_logging=_ALL_LOGS,
            secrets_encryption_key=key,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV36Layer(self, "KubectlLayer")),
        )
        if cluster_config.endpoint_access != "private":
            Validations.of(self.cluster).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-EKS1",
                    reason="the blueprint sets training.cluster.endpoint_access: public_and_private (labs only); "
                    "requests still need IAM authentication and an access entry",
                )
            )
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.node.add_dependency(self.log_group)
        # STANDARD: at the end of standard support EKS upgrades the control plane instead of billing extended
        # support (EKS User Guide, "Cluster upgrade policy").
        cfn_cluster.add_property_override("UpgradePolicy", {"SupportType": cluster_config.support_type})
        # jsii stubs: Cluster lacks a member of the ICluster protocol in Python typing only.
        self.cluster_ref = cast(eks.ICluster, self.cluster)
        self._acknowledge_generated()
        self._secure_kubectl_provider(key)
        for i, arn in enumerate(cluster_config.admin_principal_arns):
            eks.AccessEntry(
                self,
                f"Admin{i}",
                cluster=self.cluster_ref,
                principal=arn,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )

        self.addons: dict[str, eks.Addon] = {}
        for name in BEFORE_NODES:
            self.addons[name] = eks.Addon(
                self, _addon_id(name), cluster=self.cluster_ref, addon_name=name, addon_version=versions.ADDONS[name]
            )
        self.vpc_cni_role = self._vpc_cni_pod_identity(self.addons["vpc-cni"])

        system = config.system_node_group
        self.system_nodes = eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=self.cluster_ref,
            instance_types=[ec2.InstanceType(system.instance_type)],
            ami_type=(
                eks.NodegroupAmiType.AL2023_ARM_64_STANDARD
                if system.instance.arch == "arm64"
                else eks.NodegroupAmiType.AL2023_X86_64_STANDARD
            ),
            capacity_type=eks.CapacityType.ON_DEMAND,
            desired_size=system.desired_size,
            min_size=system.min_size,
            max_size=system.max_size,
            disk_size=system.disk_size_gib,
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            labels={f"{LABEL_PREFIX}/node-group": "system"},
        )
        acknowledge_node_role(self.system_nodes)
        for addon in self.addons.values():
            self.system_nodes.node.add_dependency(addon)
        # These run pods: create them once nodes can join.
        for name in AFTER_NODES:
            addon = eks.Addon(
                self,
                _addon_id(name),
                cluster=self.cluster_ref,
                addon_name=name,
                addon_version=versions.ADDONS[name],
                configuration_values=self.node_monitoring_values() if name == versions.NODE_MONITORING_AGENT else None,
            )
            addon.node.add_dependency(self.system_nodes)
            self.addons[name] = addon
        self.addons[versions.CLOUDWATCH_OBSERVABILITY] = self._cloudwatch_observability()

        kinds = {g.instance.accelerator.kind for g in config.node_groups if g.instance.accelerator is not None}
        self.charts: dict[str, eks.HelmChart] = {}
        accel_taints = [GPU_TAINT, NEURON_TAINT, EFA_TAINT]
        if "gpu" in kinds:
            self._chart(
                versions.NVIDIA_DEVICE_PLUGIN,
                {
                    "tolerations": _tolerate(*accel_taints),
                    # The chart's default affinity needs node-feature-discovery labels; select on ours instead.
                    "affinity": _on_label(f"{LABEL_PREFIX}/accelerator-kind", ["gpu"]),
                },
            )
        if kinds & {"trainium", "inferentia"}:
            # The device plugin only: the chart's scheduler extension stays off (its default; a job would also have to
            # name that scheduler), and so does its node problem detector (EKS node monitoring covers it). Values keys
            # per the chart README: check them when bumping the version.
            self._chart(
                versions.NEURON_HELM_CHART,
                {"npd": {"enabled": False}, "devicePlugin": {"tolerations": _tolerate(*accel_taints)}},
            )
        efa_types = sorted({g.instance_type for g in config.node_groups if g.efa})
        if efa_types:
            self._chart(
                versions.EFA_DEVICE_PLUGIN,
                {
                    "tolerations": _tolerate(*accel_taints),
                    # The chart's node affinity is an allow-list of instance types; a type missing from the pinned
                    # chart's list never gets the plugin. List exactly the blueprint's EFA types.
                    "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": efa_types},
                },
            )
        self._chart(versions.KUBEFLOW_TRAINER, {})

    @property
    def node_prerequisites(self) -> list[eks.Addon]:
        """The add-ons a node group must wait for (vpc-cni, kube-proxy, eks-pod-identity-agent)."""
        return [self.addons[name] for name in BEFORE_NODES]

    def node_monitoring_values(self) -> dict[str, Any]:
        """Configuration values of the eks-node-monitoring-agent add-on.

        The add-on's `dcgm-server` DaemonSet (the DCGM host engine the agent reads GPU health from) tolerates no
        taint by default (chart values `dcgmAgent.tolerations: []`): on a tainted GPU node it never runs, the agent
        reports AcceleratedHardwareReady=False and node auto repair replaces a healthy node (aws/containers-roadmap
        #2567, #2555). Tolerate exactly the taints the node groups set (`taint_keys`, the same source as the taints).
        The node agent's own default (`nodeAgent.tolerations`) already tolerates every taint; it is set here so
        that stays true should the default change.
        """
        keys = sorted({key for group in self.config.node_groups for key in taint_keys(group)})
        return {"dcgmAgent": {"tolerations": _tolerate(*keys)}, "nodeAgent": {"tolerations": [{"operator": "Exists"}]}}

    def _vpc_cni_pod_identity(self, addon: eks.Addon) -> iam.Role:
        """The VPC CNI (aws-node) gets AmazonEKS_CNI_Policy through its own EKS Pod Identity role, not the node role:
        what a pod reads from instance metadata then carries no ENI or IP permissions (EKS User Guide, "Configure
        Amazon VPC CNI plugin to use IRSA": remove the policy from the node role)."""
        role = iam.Role(
            self,
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

    def _cloudwatch_observability(self) -> eks.Addon:
        """The amazon-cloudwatch-observability add-on, its agent's Pod Identity role and association.

        The add-on's Fluent Bit and agent create their CloudWatch log groups themselves (/aws/containerinsights/
        <cluster>/application, dataplane, host, performance): they are not CloudFormation resources, so CDK sets
        neither their retention nor their encryption, and they remain after the stack is deleted.

        The add-on schedules its DCGM exporter and Neuron monitor by its own instance-type allow-list (chart values
        `dcgmExporter.affinity`; p4d, p5 and g6e are on it in the chart read for this change): a type missing from
        the EKS default version's list gets no GPU metrics. Check it when adding an instance type.
        """
        role = iam.Role(
            self,
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
            self,
            "CloudWatchAgentPodIdentity",
            cluster_name=self.cluster.cluster_name,
            namespace=versions.CLOUDWATCH_NAMESPACE,
            service_account=versions.CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        # The Pod Identity agent injects credentials when a pod starts: the association must exist before the
        # agent's pods do.
        association.node.add_dependency(self.addons["eks-pod-identity-agent"])
        self.cloudwatch_agent_role = role
        addon = eks.Addon(
            self,
            _addon_id(versions.CLOUDWATCH_OBSERVABILITY),
            cluster=self.cluster_ref,
            addon_name=versions.CLOUDWATCH_OBSERVABILITY,
            addon_version=versions.ADDONS[versions.CLOUDWATCH_OBSERVABILITY],
            # Root-level `tolerations` apply to every workload of the add-on (agent, Fluent Bit, DCGM exporter, Neuron
            # monitor) unless a component sets its own (chart values.yaml, `common.tolerations` helper). The chart's
            # default is this catch-all; it is set here so the agents keep tolerating the accelerator taints
            # (nvidia.com/gpu, aws.amazon.com/neuron, vpc.amazonaws.com/efa) should the default change. A list of
            # just those three would replace the default and drop every other taint the agents tolerate today.
            configuration_values={"tolerations": [{"operator": "Exists"}]},
        )
        addon.node.add_dependency(self.system_nodes)
        addon.node.add_dependency(association)
        return addon

    def _chart(self, chart: versions.Chart, values: dict[str, Any]) -> eks.HelmChart:
        helm = self.cluster.add_helm_chart(
            pascal_id(chart.release) + "Chart",
            chart=chart.chart,
            repository=chart.repository,
            version=chart.version,
            release=chart.release,
            namespace=chart.namespace,
            create_namespace=chart.namespace != "kube-system",
            values=values,
            wait=False,
        )
        helm.node.add_dependency(self.system_nodes)
        self.charts[chart.release] = helm
        return helm

    def _acknowledge_generated(self) -> None:
        """cdk-nag findings on roles and functions that aws_eks_v2 generates (not configurable from here)."""
        managed = "Policy::arn:<AWS::Partition>:iam::aws:policy"
        Validations.of(self.cluster.role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM4[{managed}/AmazonEKSClusterPolicy]",
                reason="the EKS service role must carry AmazonEKSClusterPolicy (EKS User Guide, cluster IAM role)",
            )
        )
        provider = self.cluster.node.find_child("KubectlProvider")
        handler = provider.node.find_child("Handler")
        stack = Stack.of(self)
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

    def _secure_kubectl_provider(self, key: kms.IKey) -> None:
        """CDK's kubectl-provider functions (the handler that runs kubectl/helm, and the provider framework's
        onEvent): their log groups get the project key; the checkov findings CDK's code leaves open are skipped on
        each function with the reason."""
        provider = self.cluster.node.find_child("KubectlProvider")
        for child in provider.node.find_all():
            if isinstance(child, logs.CfnLogGroup):
                # The key policy lets CloudWatch Logs use the key for this account's log groups (NetworkStack).
                child.kms_key_id = key.key_arn
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

    @property
    def cluster_security_group_id(self) -> str:
        """The EKS-created cluster security group (it allows all traffic within itself, EFA included)."""
        return self.cluster.cluster_security_group_id

    def add_manifest(self, construct_id: str, *manifest: dict[str, Any]) -> eks.KubernetesManifest:
        return self.cluster.add_manifest(construct_id, *manifest)


def _addon_id(name: str) -> str:
    return pascal_id(name) + "Addon"
