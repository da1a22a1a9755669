"""The elastic part of the hyperpod-eks `TrainingClusterStack`: HyperPod task governance with the blueprint's teams,
and HyperPod's managed Karpenter pools. Decisions come from `mlstack.design.hyperpod_governance`; this module maps
them to the constructs' props and orders them after the HyperPod cluster they name."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms

from mlstack.config import BlueprintConfig
from mlstack.config.budget import BUDGET_TAG
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.hyperpod import HyperPodCluster
from mlstack.constructs.training.hyperpod_governance import (
    ComputeResource,
    HyperPodTaskGovernance,
    TeamAllocation,
)
from mlstack.constructs.training.hyperpod_ready import HyperPodAutoscalingReady
from mlstack.constructs.training.versions import HYPERPOD_TASK_GOVERNANCE_VERSION
from mlstack.design.hyperpod_governance import autoscaling, governance
from mlstack.k8s.hyperpod_karpenter import NODE_CLASS_CRD, hyperpod_pool_manifests
from mlstack.stacks.base import MlStack


def add_task_governance(
    stack: MlStack,
    blueprint: BlueprintConfig,
    cluster: TrainingCluster,
    hyperpod: HyperPodCluster,
    namespace_manifest: eks.KubernetesManifest,
) -> HyperPodTaskGovernance | None:
    """Task governance for the blueprint's teams; None without teams. The job namespace is the job team's
    `hyperpod-ns-<team>`, which HyperPod creates with that team's allocation: the stack's own Namespace manifest
    (which then only adopts it) waits for the allocation."""
    training = blueprint.training
    design = governance(training) if training is not None else None
    if design is None or training is None:
        return None
    governed = HyperPodTaskGovernance(
        stack,
        "TaskGovernance",
        cluster=cluster.cluster_ref,
        hyperpod_cluster_arn=hyperpod.cluster_arn,
        name=blueprint.name,
        priority_classes=design.priority_classes,
        teams=[
            TeamAllocation(
                name=t.name,
                # CPU and memory explicit: the job pods' requests per node, in proportion to the accelerators.
                resources=[
                    ComputeResource(a.instance_type, a.accelerators, a.vcpu, a.memory_gib) for a in t.allocations
                ],
                weight=t.weight,
                strategy="Lend" if t.strategy == "Lend" else "LendAndBorrow",
                borrow_percent=t.borrow_percent,
                absolute_borrow=[
                    ComputeResource(a.instance_type, a.borrow or 0, a.borrow_vcpu, a.borrow_memory_gib)
                    for a in t.absolute_borrow
                ],
                preempt="LowerPriority",
            )
            for t in design.teams
        ],
        fair_share=True,
        addon_version=HYPERPOD_TASK_GOVERNANCE_VERSION,
        # The stack's tags (`MlStack`), which its Tags.of does not put on a raw CfnResource.
        tags={BUDGET_TAG: blueprint.name, **dict(sorted(blueprint.tags.items()))},
    )
    # Kueue's controller runs on the system nodes; the allocations name the HyperPod cluster.
    governed.addon.node.add_dependency(cluster.system_nodes, hyperpod.cluster)
    namespace_manifest.node.add_dependency(governed.quotas[design.team(training.job.team).name])
    return governed


def add_hyperpod_pools(
    stack: MlStack, blueprint: BlueprintConfig, cluster: TrainingCluster, hyperpod: HyperPodCluster, key: kms.IKey
) -> eks.KubernetesManifest | None:
    """The HyperpodNodeClass + NodePool of every instance group; None without autoscaling. HyperPod installs the
    HyperpodNodeClass CRD only once the cluster's autoscaling is InService ("Create a NodeClass"), after the cluster
    resource completes, and CDK's apply handler fails `no matches for kind` at once: the manifest waits for
    `HyperPodAutoscalingReady` (DescribeCluster AutoScaling.Status InService, up to 45 minutes), then for the CRD
    itself (`kubectl get crd` retried until it answers, up to 10 minutes)."""
    training = blueprint.training
    design = autoscaling(training) if training is not None else None
    if design is None or training is None:
        return None
    ready = HyperPodAutoscalingReady(
        stack,
        "HyperPodAutoscalingReady",
        cluster_name=hyperpod.cluster_name,
        cluster_arn=hyperpod.cluster_arn,
        key=key,
        query_interval=Duration.minutes(1),
        total_timeout=Duration.minutes(45),
        removal_policy=stack.removal_policy,
    )
    # CDK's get handler retries `kubectl get` (NotFound included) every 10 s until the CRD's Established condition
    # has a status; the kubectl provider's function runs for at most 15 minutes.
    crd = eks.KubernetesObjectValue(
        stack,
        "HyperPodNodeClassCrd",
        cluster=cluster.cluster_ref,
        object_type="customresourcedefinition",
        object_name=NODE_CLASS_CRD,
        json_path='.status.conditions[?(@.type=="Established")].status',
        timeout=Duration.minutes(10),
    )
    crd.node.add_dependency(ready.resource)
    manifest = cluster.add_manifest("HyperPodPools", *hyperpod_pool_manifests(training, design))
    manifest.node.add_dependency(hyperpod.cluster, crd)
    return manifest
