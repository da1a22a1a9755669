"""`TrainingClusterStack`: an EKS training cluster with EFA-wired accelerated node groups and FSx for Lustre.

Its part of `mlstack plan` is `mlstack.plan.training` (no CDK import there).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import FsxConfig, TrainingConfig
from mlstack.config.training_cluster import ClusterConfig, SystemNodeGroupConfig
from mlstack.constructs.network.ml_vpc import retention
from mlstack.constructs.storage.fsx_lustre import DataRepository, FsxLustre
from mlstack.constructs.training.admin_host import ClusterAdminHost
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.cluster_parts import SystemNodes
from mlstack.constructs.training.node_group import Capacity
from mlstack.design.host_metrics import host_agent
from mlstack.design.training import ADMIN_HOST_TYPE, cluster_name, memory_warnings, node_group_designs
from mlstack.k8s.disruption import job_disruption_budget
from mlstack.k8s.job import FSX_CLAIM
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training_base import TrainingEngineStack
from mlstack.stacks.training_elastic import add_karpenter, add_kueue
from mlstack.stacks.training_image import add_first_job
from mlstack.stacks.training_ops import add_operations

STACK = "TrainingClusterStack"


class TrainingClusterStack(TrainingEngineStack):
    """EKS cluster, node groups (one per blueprint entry, EFA from the catalog), FSx for Lustre, manifests."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            network=network,
            description=f"mlstack {blueprint.name}: EKS training cluster, EFA node groups, FSx for Lustre",
            **kwargs,
        )
        training = self.training
        zones = blueprint.zones
        vpc = network.vpc
        key = network.key

        self.cluster = TrainingCluster(
            self, "Training", **cluster_props(blueprint, network), removal_policy=self.removal_policy
        )
        self.admin_host = admin_host(self, network, self.cluster, training)
        self.karpenter = add_karpenter(self, blueprint, network, self.cluster, cluster_name(blueprint))
        agent = host_agent(blueprint, training)
        for group in node_group_designs(blueprint) if self.karpenter is None else []:
            # In the stack's scope, where earlier releases created them: their logical IDs stay put.
            self.cluster.add_accelerated_node_group(
                group.name,
                scope=self,
                instance_type=group.instance_type,
                subnets=[network.network.subnet_in(z) for z in group.zones],
                efa=group.efa,
                placement_group=group.placement_group,
                efa_on_every_card=group.efa_on_every_card,
                capacity=Capacity(group.capacity_type, group.reservation_id, group.placement_group_name),
                desired_size=group.desired_size,
                min_size=group.min_size,
                max_size=group.max_size,
                root_volume_gib=group.root_volume_gib,
                key=network.key,
                host_agent=agent,
            )
        self.node_groups = self.cluster.node_groups
        self.efa = {name: group.efa for name, group in self.node_groups.items() if group.efa is not None}
        self.efa.update({name: pool.efa for name, pool in self.cluster.pools.items() if pool.efa is not None})

        namespace = training.job.namespace
        namespace_manifest = self.cluster.add_manifest(
            "JobNamespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        self.job_image = add_first_job(self, blueprint, self.cluster, namespace_manifest)
        self.kueue = add_kueue(self, blueprint, self.cluster, namespace_manifest)
        # Node-group updates drain without force: this budget keeps them from evicting a running job.
        budget = self.cluster.add_manifest("JobDisruptionBudget", job_disruption_budget(namespace))
        budget.node.add_dependency(namespace_manifest)
        self.fsx: FsxLustre | None = None
        if training.fsx is not None:
            fsx_zone = training.fsx_zone(zones)
            self.fsx = FsxLustre(
                self,
                "Fsx",
                vpc=vpc,
                subnet=network.network.subnet_in(fsx_zone),
                key=key,
                clients=self.cluster.node_connections,
                **fsx_props(training.fsx),
                removal_policy=self.removal_policy,
            )
            self.cluster.add_file_system(
                *self.fsx.kubernetes_manifests(namespace=namespace, claim_name=FSX_CLAIM), namespace=namespace_manifest
            )

        self.operations = add_operations(self, network, fsx=self.fsx, cluster=self.cluster)
        kernel_log = self.operations.observability.host_log_group
        if kernel_log is not None and self.karpenter is not None:
            # Karpenter launches nodes once a pool exists; their agents write to the kernel-log group.
            for manifest in self.karpenter.pools.values():
                manifest.node.add_dependency(kernel_log)
        for warning in memory_warnings(training):
            Annotations.of(self).add_warning_v2("mlstack:model-fit", warning)


def admin_host(
    stack: MlStack, network: NetworkStack, cluster: TrainingCluster, training: TrainingConfig
) -> ClusterAdminHost | None:
    """The cluster's SSM-only admin host (construct `AdminHost` in `stack`) when `training.cluster.admin_host`."""
    if not training.cluster.admin_host:
        return None
    return ClusterAdminHost(
        stack,
        "AdminHost",
        vpc=network.vpc,
        subnet=network.network.private_subnets[0],
        key=network.key,
        cluster=cluster.cluster,
        kubernetes_version=training.cluster.kubernetes_version,
        instance_type=ADMIN_HOST_TYPE,
    )


def cluster_props(blueprint: BlueprintConfig, network: NetworkStack) -> dict[str, Any]:
    """The `TrainingCluster` keyword props of the blueprint's `training.cluster` and system node group (every
    engine that runs an EKS control plane builds it the same way)."""
    if blueprint.training is None:
        raise ValueError(f"blueprint {blueprint.name!r} has no training section")
    # The eks engine's example job is a Kubeflow Trainer TrainJob; HyperPod on EKS keeps the chart it has always
    # had (its example job is a PyTorchJob of the HyperPod chart's operator).
    return eks_cluster_props(
        network,
        blueprint.training.cluster,
        blueprint.training.system_node_group,
        name=cluster_name(blueprint),
        trainer_operator=True,
    )


def eks_cluster_props(
    network: NetworkStack,
    cluster: ClusterConfig,
    system: SystemNodeGroupConfig,
    *,
    name: str,
    trainer_operator: bool,
) -> dict[str, Any]:
    """`TrainingCluster`'s keyword props from a `cluster:` and `system_node_group:` section (training, or the EKS
    serving cluster with `trainer_operator` False)."""
    return {
        "vpc": network.vpc,
        "subnets": network.network.private_subnets,
        "key": network.key,
        "cluster_name": name,
        "kubernetes_version": cluster.kubernetes_version,
        "public_endpoint": cluster.endpoint_access != "private",
        "admin_principal_arns": cluster.admin_principal_arns,
        "support_type": cluster.support_type,
        "control_plane_log_retention": retention(cluster.log_retention_days),
        "system_nodes": SystemNodes(
            instance_type=system.instance_type,
            desired_size=system.desired_size,
            min_size=system.min_size,
            max_size=system.max_size,
            disk_size_gib=system.disk_size_gib,
        ),
        "trainer_operator": trainer_operator,
    }


def fsx_props(fsx: FsxConfig) -> dict[str, Any]:
    """The `FsxLustre` keyword props of the blueprint's `training.fsx` (every training engine mounts the same)."""
    repo = fsx.data_repository
    return {
        "deployment_type": fsx.deployment_type,
        "storage_capacity_gib": fsx.storage_capacity_gib,
        "per_unit_storage_throughput": fsx.per_unit_storage_throughput,
        "data_compression": fsx.data_compression,
        "automatic_backup_retention_days": fsx.automatic_backup_retention_days,
        "data_repository": None
        if repo is None
        else DataRepository(
            s3_path=repo.s3_path,
            file_system_path=repo.file_system_path,
            import_events=tuple(repo.import_events),
            export_events=tuple(repo.export_events),
        ),
    }
