"""The node autoscaling of `EksInferenceStack` (`inference.capacity_manager: karpenter`): the training layer's
`Karpenter` construct on the serving cluster and one pool per endpoint over every private subnet. Decisions come
from `mlstack.design.serving_pools`; this module maps them to the construct's props."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks

from mlstack.config import BlueprintConfig
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.karpenter import Karpenter
from mlstack.design.karpenter import Pool
from mlstack.k8s.karpenter import NodeClassRefs
from mlstack.k8s.serving_pools import serving_pool_manifests
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack


def add_serving_karpenter(
    stack: MlStack, blueprint: BlueprintConfig, network: NetworkStack, cluster: TrainingCluster, name: str
) -> Karpenter | None:
    """Karpenter (construct `Karpenter`) on the serving cluster named `name`; None with fixed node groups."""
    config = blueprint.inference_eks
    if config is None or config.capacity_manager != "karpenter":
        return None
    return Karpenter(stack, "Karpenter", cluster=cluster, cluster_name=name, key=network.key, host_agent=None)


def add_endpoint_pool(
    stack: MlStack,
    karpenter: Karpenter,
    pool: Pool,
    network: NetworkStack,
    cluster_name: str,
    *,
    block_drift: bool,
) -> eks.KubernetesManifest:
    """The endpoint's EC2NodeClass + NodePool (construct `<Endpoint>Pool`), its nodes in every private subnet (the
    servers need no EFA and no placement group, so any zone of the network serves); `block_drift`: keep drifted
    nodes (`mlstack.design.serving_pools.blocks_drift`)."""
    subnets = network.network.private_subnets

    def render(**refs: Any) -> list[dict[str, Any]]:
        refs["subnet_ids"] = tuple(s.subnet_id for s in subnets)
        return serving_pool_manifests(pool, NodeClassRefs(cluster_name=cluster_name, **refs), block_drift=block_drift)

    return karpenter.add_pool(
        pool.name,
        instance_types=pool.instance_types,
        efa=False,
        placement_group=False,
        subnet=subnets[0],
        render=render,
        scope=stack,
    )
