"""`TrainingCluster`: the EKS control plane, system nodes, add-ons and Helm charts of a training cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from aws_cdk import Acknowledgment, Lazy, RemovalPolicy, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from mlstack.catalog import InstanceType, get_instance
from mlstack.constructs.common import pascal_id
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.training import versions
from mlstack.constructs.training.admin_host import ADMIN_POLICY
from mlstack.constructs.training.cluster_charts import device_plugins
from mlstack.constructs.training.cluster_parts import (
    ALL_LOGS,
    KUBECTL_LAYERS,
    AcceleratorPool,
    Produce,
    SystemNodes,
    acknowledge_generated,
    addon_id,
    cloudwatch_observability,
    secure_kubectl_provider,
    tolerate,
    vpc_cni_pod_identity,
)
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.metric_names import HostAgent
from mlstack.constructs.training.node_group import AcceleratedNodeGroup, Capacity, acknowledge_node_role, taint_keys
from mlstack.k8s.kube import LABEL_PREFIX

BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
"""Add-ons every node group (system and accelerated) waits for: a node that starts first gets no pod IPs."""
AFTER_NODES = ("coredns", "aws-fsx-csi-driver", "eks-node-monitoring-agent")

DEFAULT_KUBERNETES_VERSION = "1.35"


class TrainingCluster(Construct):
    """An EKS cluster (aws_eks_v2) for training.

    - Private API endpoint by default, access entries for the given admins, all five control-plane log types,
      Kubernetes secrets encrypted with `key`.
    - A small system node group (AL2023, On-Demand) for cluster services; accelerated groups are added with
      `add_accelerated_node_group`, which also keeps the device plugins in step with them.
    - Managed add-ons: VPC CNI (EFA-only capable), kube-proxy, Pod Identity agent, CoreDNS, FSx CSI driver, the
      node monitoring agent (node conditions such as AcceleratedHardwareReady, used by node auto repair) and
      amazon-cloudwatch-observability: Container Insights and its Neuron monitor (Trainium/Inferentia metrics); its
      DCGM exporter is off, so the node monitoring agent's DCGM host engine is the only one on a GPU node
      (`cloudwatch_observability_values`); its agent gets CloudWatchAgentServerPolicy through EKS Pod Identity.
    - Helm charts (versions in `versions.py`): the NVIDIA or Neuron device plugin once a group of that kind is
      added, the EFA device plugin (tolerating the accelerator taints, which its chart default does not) once an
      EFA group is, and the Kubeflow Trainer operator. No dcgm-exporter chart: one DCGM host engine per GPU node.

    Props (keyword; defaults in parentheses): `vpc`, `subnets` (the control plane's, in two AZs or more), `key`,
    `cluster_name` (required: the control-plane log group is named after it before the cluster exists);
    `kubernetes_version` (1.35; a key of `KUBECTL_LAYERS`), `public_endpoint` (False: the API is reachable only
    from the VPC),
    `admin_principal_arns` (none: IAM roles or users given cluster-admin through access entries),
    `support_type` (STANDARD: EKS upgrades the control plane at the end of standard support instead of billing
    extended support), `control_plane_log_retention` (one year), `system_nodes` (`SystemNodes()`),
    `removal_policy` (`RETAINED`, for the control-plane log group), `trainer_operator` (True: the Kubeflow Trainer
    chart; a serving cluster leaves it out).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        key: kms.IKey,
        cluster_name: str,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        public_endpoint: bool = False,
        admin_principal_arns: Sequence[str] = (),
        support_type: Literal["STANDARD", "EXTENDED"] = "STANDARD",
        control_plane_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        system_nodes: SystemNodes | None = None,
        removal_policy: RemovalPolicy = RETAINED,
        trainer_operator: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if kubernetes_version not in KUBECTL_LAYERS:
            raise ValueError(
                f"kubernetes_version {kubernetes_version!r} has no kubectl layer here; use one of "
                f"{', '.join(KUBECTL_LAYERS)}"
            )
        self.vpc = vpc
        self.key = key
        self.kubernetes_version = kubernetes_version
        self.kubectl_layer = KUBECTL_LAYERS[kubernetes_version](self, "KubectlLayer")
        self.node_groups: dict[str, AcceleratedNodeGroup] = {}
        self.pools: dict[str, AcceleratorPool] = {}
        # EKS writes control-plane logs to /aws/eks/<name>/cluster and creates that group itself (no retention, no
        # key) unless it exists: create it first, so the stack owns its retention and encryption. That needs a
        # cluster name known before the cluster exists, hence the explicit name.
        self.log_group = logs.LogGroup(
            self,
            "ControlPlaneLogGroup",
            log_group_name=f"/aws/eks/{cluster_name}/cluster",
            retention=control_plane_log_retention,
            encryption_key=key,
            removal_policy=removal_policy,
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            endpoint_access=eks.EndpointAccess.PUBLIC_AND_PRIVATE if public_endpoint else eks.EndpointAccess.PRIVATE,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_self_managed_addons=False,
            cluster_logging=ALL_LOGS,
            secrets_encryption_key=key,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
        )
        if public_endpoint:
            Validations.of(self.cluster).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-EKS1",
                    reason="public_endpoint is set (labs only); requests still need IAM authentication and an "
                    "access entry",
                )
            )
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.node.add_dependency(self.log_group)
        # STANDARD: at the end of standard support EKS upgrades the control plane instead of billing extended
        # support (EKS User Guide, "Cluster upgrade policy").
        cfn_cluster.add_property_override("UpgradePolicy", {"SupportType": support_type})
        # jsii stubs: Cluster lacks a member of the ICluster protocol in Python typing only.
        self.cluster_ref = cast(eks.ICluster, self.cluster)
        acknowledge_generated(self.cluster)
        secure_kubectl_provider(self.cluster, key, removal_policy)
        for i, arn in enumerate(admin_principal_arns):
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
                self, addon_id(name), cluster=self.cluster_ref, addon_name=name, addon_version=versions.ADDONS[name]
            )
        self.vpc_cni_role = vpc_cni_pod_identity(self, self.addons["vpc-cni"])

        system = system_nodes or SystemNodes()
        self.system_nodes = eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=self.cluster_ref,
            instance_types=[ec2.InstanceType(system.instance_type)],
            ami_type=(
                eks.NodegroupAmiType.AL2023_ARM_64_STANDARD
                if get_instance(system.instance_type).arch == "arm64"
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
                addon_id(name),
                cluster=self.cluster_ref,
                addon_name=name,
                addon_version=versions.ADDONS[name],
                configuration_values=self.node_monitoring_values() if name == versions.NODE_MONITORING_AGENT else None,
            )
            addon.node.add_dependency(self.system_nodes)
            self.addons[name] = addon
        self.addons[versions.CLOUDWATCH_OBSERVABILITY], self.cloudwatch_agent_role = cloudwatch_observability(
            self,
            self.cluster,
            pod_identity_agent=self.addons["eks-pod-identity-agent"],
            system_nodes=self.system_nodes,
        )
        self.charts: dict[str, eks.HelmChart] = {}
        if trainer_operator:
            self.add_chart(versions.KUBEFLOW_TRAINER, {})

    @property
    def node_prerequisites(self) -> list[eks.Addon]:
        """The add-ons a node group must wait for (vpc-cni, kube-proxy, eks-pod-identity-agent)."""
        return [self.addons[name] for name in BEFORE_NODES]

    def node_monitoring_values(self) -> dict[str, Any]:
        """Configuration values of the eks-node-monitoring-agent add-on.

        The add-on's `dcgm-server` DaemonSet (the DCGM host engine the agent reads GPU health from) tolerates no
        taint by default (chart values `dcgmAgent.tolerations: []`): on a tainted GPU node it never runs, the agent
        reports AcceleratedHardwareReady=False and node auto repair replaces a healthy node (aws/containers-roadmap
        #2567, #2555). Tolerate exactly the taints the node groups set (`taint_keys`, the same source as the taints),
        computed at synth time so groups added later count. The node agent's own default (`nodeAgent.tolerations`)
        already tolerates every taint; it is set here so that stays true should the default change.
        """
        return {
            "dcgmAgent": {"tolerations": Lazy.any(Produce(lambda: tolerate(*self.taint_keys())))},
            "nodeAgent": {"tolerations": [{"operator": "Exists"}]},
        }

    def taint_keys(self) -> list[str]:
        """Every taint key the accelerated node groups set so far, sorted."""
        keys = {k for g in self.node_groups.values() for k in taint_keys(g.instance, efa=g.efa is not None)}
        keys |= {k for p in self.pools.values() for it in p.instances for k in taint_keys(it, efa=p.efa is not None)}
        return sorted(keys)

    def efa_instance_types(self) -> list[str]:
        """The instance types of the EFA node groups added so far, sorted (the EFA device plugin's allow-list)."""
        types = {group.instance.name for group in self.node_groups.values() if group.efa is not None}
        return sorted(types | {it.name for p in self.pools.values() if p.efa is not None for it in p.instances})

    def add_accelerated_node_group(
        self,
        name: str,
        *,
        instance_type: str,
        subnets: Sequence[ec2.ISubnet],
        efa: bool | None = None,
        placement_group: bool | None = None,
        efa_on_every_card: bool = False,
        capacity: Capacity | None = None,
        desired_size: int = 0,
        min_size: int = 0,
        max_size: int = 2,
        root_volume_gib: int = 200,
        key: kms.IKey | None = None,
        scope: Construct | None = None,
        host_agent: HostAgent | None = None,
    ) -> AcceleratedNodeGroup:
        """Add a managed node group of `instance_type` and keep the cluster in step with it.

        - `efa` (default: on where the instance supports EFA) creates the group's `EfaNetworking` (its own
          self-referencing security group, and a cluster placement group unless `placement_group` is False or a
          reservation fixes placement) and puts every EFA of the instance in the launch template.
        - The device plugin of the instance's accelerator (NVIDIA or Neuron) is installed with the first group of
          that kind; the EFA device plugin's instance-type allow-list and the node monitoring agent's tolerations
          follow every group added (computed at synth).
        - The group waits for the add-ons a node needs before it can give pods IPs (`node_prerequisites`).

        Construct IDs are `<Name>Efa` and `<Name>Nodes` (`pascal_id(name)`) under `scope` (default: this cluster).
        The other props are `AcceleratedNodeGroup`'s; `key` defaults to the cluster's key.
        """
        if name == "system":
            raise ValueError("'system' names the system node group (its node-group label); pick another name")
        if name in self.node_groups:
            raise ValueError(f"node group {name!r} exists already; give each node group its own name")
        scope = scope or self
        capacity = capacity or Capacity()
        instance = get_instance(instance_type)
        efa = instance.efa_supported if efa is None else efa
        if placement_group is None:
            placement_group = efa and not capacity.is_reservation
        efa_networking = None
        if efa:
            efa_networking = EfaNetworking(
                scope, f"{pascal_id(name)}Efa", vpc=self.vpc, subnet=subnets[0], placement_group=placement_group
            )
        group = AcceleratedNodeGroup(
            scope,
            f"{pascal_id(name)}Nodes",
            cluster=self.cluster_ref,
            name=name,
            instance_type=instance.name,
            subnets=subnets,
            key=key or self.key,
            cluster_security_group=self.cluster.cluster_security_group,
            efa=efa_networking,
            efa_on_every_card=efa_on_every_card,
            capacity=capacity,
            desired_size=desired_size,
            min_size=min_size,
            max_size=max_size,
            root_volume_gib=root_volume_gib,
            host_agent=host_agent,
        )
        # Like the system nodes: a node that starts before the CNI, kube-proxy and Pod Identity agent add-ons exist
        # cannot give its pods IPs.
        for addon in self.node_prerequisites:
            group.nodegroup.node.add_dependency(addon)
        self.node_groups[name] = group
        self._device_plugins(instance, efa=efa)
        return group

    def add_accelerator_pool(
        self,
        name: str,
        *,
        instance_types: Sequence[str],
        subnet: ec2.ISubnet,
        efa: bool,
        placement_group: bool,
        scope: Construct | None = None,
    ) -> AcceleratorPool:
        """Register nodes that another provisioner (Karpenter) launches for `name`, and keep the cluster in step: the
        EFA networking (construct `<Name>Efa` under `scope`, as for a node group), the device plugins, the EFA
        plugin's allow-list and the node agents' tolerations (`taint_keys`). The caller creates the nodes' pool."""
        if name == "system" or name in self.node_groups or name in self.pools:
            raise ValueError(f"accelerator pool {name!r}: the name is taken; give each pool its own name")
        instances = tuple(get_instance(t) for t in instance_types)
        networking = None
        if efa:
            networking = EfaNetworking(
                scope or self, f"{pascal_id(name)}Efa", vpc=self.vpc, subnet=subnet, placement_group=placement_group
            )
        pool = AcceleratorPool(name, instances, networking)
        self.pools[name] = pool
        for it in instances:
            self._device_plugins(it, efa=efa)
        return pool

    def _device_plugins(self, instance: InstanceType, *, efa: bool) -> None:
        found = device_plugins(instance, efa=efa, installed=self.charts, efa_instance_types=self.efa_instance_types)
        for chart, values in found:
            self.add_chart(chart, values)

    @property
    def node_connections(self) -> ec2.Connections:
        """Every accelerated node, for a peer such as a file system to admit: the EFA group of each EFA node group
        (on every interface of those nodes) and, when some node group has no EFA, the EKS cluster security group
        (the only group on such nodes). Read it after the node groups are added."""
        every: list[AcceleratedNodeGroup | AcceleratorPool] = [*self.node_groups.values(), *self.pools.values()]
        groups: list[ec2.ISecurityGroup] = [g.efa.security_group for g in every if g.efa]
        if any(g.efa is None for g in every):
            groups.append(self.cluster.cluster_security_group)
        return ec2.Connections(security_groups=groups)

    def add_chart(
        self, chart: versions.Chart, values: dict[str, Any], *, wait: bool = False, skip_crds: bool = False
    ) -> eks.HelmChart:
        """Install `chart` (a `versions` pin) on the system nodes' cluster; `wait` until its workloads are ready
        (a chart whose webhooks must answer before the next manifest); `skip_crds`: without its `crds/`."""
        helm = self.cluster.add_helm_chart(
            pascal_id(chart.release) + "Chart",
            chart=chart.chart,
            repository=chart.repository,
            version=chart.version,
            release=chart.release,
            namespace=chart.namespace,
            create_namespace=chart.namespace != "kube-system",
            values=values,
            wait=wait,
            skip_crds=skip_crds,
        )
        helm.node.add_dependency(self.system_nodes)
        self.charts[chart.release] = helm
        return helm

    @property
    def cluster_security_group_id(self) -> str:
        """The EKS-created cluster security group (it allows all traffic within itself, EFA included)."""
        return self.cluster.cluster_security_group_id

    def add_manifest(self, construct_id: str, *manifest: dict[str, Any]) -> eks.KubernetesManifest:
        return self.cluster.add_manifest(construct_id, *manifest)

    def add_file_system(
        self, *manifest: dict[str, Any], namespace: IConstruct, construct_id: str = "FsxVolume"
    ) -> eks.KubernetesManifest:
        """The manifests that mount a file system in pods (an FSx for Lustre PersistentVolume and its claim, from
        `FsxLustre.kubernetes_manifests`), applied once the FSx CSI driver add-on and the claim's `namespace`
        manifest exist."""
        volume = self.cluster.add_manifest(construct_id, *manifest)
        volume.node.add_dependency(self.addons["aws-fsx-csi-driver"])
        volume.node.add_dependency(namespace)
        return volume
