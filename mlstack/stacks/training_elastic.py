"""The elastic part of `TrainingClusterStack` (engine eks): Karpenter pools instead of node groups when
`training.capacity_manager` is karpenter, and Kueue when the blueprint has `teams`. Decisions come from
`mlstack.design.karpenter` / `mlstack.design.kueue`; this module maps them to the constructs' props."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks

from mlstack.config import BlueprintConfig
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.karpenter import Karpenter
from mlstack.constructs.training.kueue import Kueue
from mlstack.constructs.training.metric_names import HostAgent
from mlstack.constructs.training.node_group import node_user_data
from mlstack.design.host_metrics import host_agent
from mlstack.design.karpenter import Pool, pools
from mlstack.design.kueue import queues
from mlstack.k8s.karpenter import NodeClassRefs, pool_manifests
from mlstack.k8s.kueue import controller_config, queue_manifests
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack


def _render(pool: Pool, name: str, agent: HostAgent | None) -> Any:
    # The CloudWatch agent's part only on NVIDIA pools (the same user data as a managed node group's).
    gpu = pool.instance.accelerator is not None and pool.instance.accelerator.vendor == "nvidia"
    user_data = node_user_data(local_nvme=False, host_agent=agent) if gpu and agent is not None else None

    def render(**refs: Any) -> list[dict[str, Any]]:
        return pool_manifests(pool, NodeClassRefs(cluster_name=name, user_data=user_data, **refs))

    return render


def add_karpenter(
    stack: MlStack, blueprint: BlueprintConfig, network: NetworkStack, cluster: TrainingCluster, name: str
) -> Karpenter | None:
    """Karpenter (construct `Karpenter`) and one pool per node group of the cluster named `name`; None with
    capacity_manager node_groups."""
    training = blueprint.training
    if training is None or training.capacity_manager != "karpenter":
        return None
    agent = host_agent(blueprint, training)
    karpenter = Karpenter(stack, "Karpenter", cluster=cluster, cluster_name=name, key=network.key, host_agent=agent)
    for pool in pools(training, blueprint.zones):
        karpenter.add_pool(
            pool.name,
            instance_types=pool.instance_types,
            efa=pool.efa,
            placement_group=pool.placement_group,
            subnet=network.network.subnet_in(pool.zones[0]),
            render=_render(pool, name, agent),
            scope=stack,
        )
    return karpenter


def add_kueue(
    stack: MlStack, blueprint: BlueprintConfig, cluster: TrainingCluster, namespace_manifest: eks.KubernetesManifest
) -> Kueue | None:
    """Kueue (construct `Kueue`) with the blueprint's team queues; None without teams."""
    if blueprint.training is None:
        return None
    design = queues(blueprint.training)
    if design is None:
        return None
    return Kueue(
        stack,
        "Kueue",
        cluster=cluster,
        controller_config=controller_config(),
        manifests=queue_manifests(design),
        namespace_manifest=namespace_manifest,
    )
