"""The elastic part of `TrainingClusterStack`: on engine eks the `Karpenter` construct and its pools, and `Kueue`; on
hyperpod-eks HyperPod task governance and HyperPod autoscaling (`mlstack.design.hyperpod_governance`).

`KARPENTER_PARTS` is the one list of what `Karpenter` creates besides its pools, with the plan's words for each
(`mlstack.plan.training_elastic` lists these rows); the pools and queues come from `mlstack.design.karpenter` and
`mlstack.design.kueue`, the same designs the stack builds from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mlstack.constructs.training import versions
from mlstack.design.footprint.parts import (
    ACCESS_ENTRY,
    FUNCTION,
    HELM_CHART,
    KUBERNETES_RESOURCE,
    LOG_GROUP,
    POD_IDENTITY,
    POLICY,
    QUEUE,
    QUEUE_POLICY,
    ROLE,
    RULE,
    Footprint,
    efa_networking,
)
from mlstack.design.hyperpod_governance import Autoscaling, Governance
from mlstack.design.karpenter import Pool
from mlstack.design.kueue import Queues

INTERRUPTION_RULES = 5
"""Spot interruption, rebalance, instance state change, AWS Health scheduled change, capacity-reservation
interruption: the rules of Karpenter's getting-started template (`Karpenter.INTERRUPTION_EVENTS`)."""


@dataclass(frozen=True)
class Part:
    """`count` resources of CloudFormation `cfn_type` that a construct creates, and what they are."""

    cfn_type: str
    count: int
    what: str


KARPENTER_PARTS: tuple[Part, ...] = (
    Part(ROLE, 1, "Karpenter node role (AmazonEKSWorkerNodePolicy, ECR read-only)"),
    Part(ACCESS_ENTRY, 1, "Karpenter node role, type EC2_LINUX (nodes join)"),
    Part(QUEUE, 1, "Karpenter interruption queue (5 min retention, SQS-managed encryption, TLS only)"),
    Part(QUEUE_POLICY, 1, "EventBridge may send to the interruption queue (TLS only)"),
    Part(
        RULE, INTERRUPTION_RULES, "Spot interruption, rebalance, state change, AWS Health, capacity-reservation events"
    ),
    Part(ROLE, 1, "Karpenter controller role (EKS Pod Identity, kube-system/karpenter)"),
    Part(POLICY, 1, "Karpenter controller policy (documented, scoped to this cluster, node role, queue, key)"),
    Part(POD_IDENTITY, 1, "kube-system/karpenter -> controller role"),
    Part(HELM_CHART, 1, f"Karpenter CRD chart {versions.KARPENTER_CRD.version} (upgraded with it)"),
    Part(HELM_CHART, 1, f"Karpenter chart {versions.KARPENTER.version} (without its CRDs)"),
)
"""`Karpenter` without its pools."""


def pool(design: Pool) -> Footprint:
    """`Karpenter.add_pool`: the EC2NodeClass + NodePool manifest, and the pool's `EfaNetworking` with EFA."""
    found = Counter({KUBERNETES_RESOURCE: 1})
    if design.efa:
        found += efa_networking(placement_group=design.placement_group)
    return found


def karpenter(pools: Sequence[Pool], *, host_agent: bool = False) -> Footprint:
    """`Karpenter` and its pools; nothing without pools (capacity_manager node_groups). `host_agent`: the node role
    has a policy (the CloudWatch agent's statements)."""
    if not pools:
        return Counter()
    found: Footprint = Counter({"AWS::IAM::Policy": 1}) if host_agent else Counter()
    for part in KARPENTER_PARTS:
        found[part.cfn_type] += part.count
    for design in pools:
        found += pool(design)
    return found


def kueue(design: Queues | None) -> Footprint:
    """`Kueue`: its chart and one manifest of flavors, queues and priority classes; nothing without teams."""
    return Counter() if design is None else Counter({HELM_CHART: 1, KUBERNETES_RESOURCE: 1})


ADDON = "AWS::EKS::Addon"
SCHEDULER_CONFIG = "AWS::SageMaker::ClusterSchedulerConfig"
COMPUTE_QUOTA = "AWS::SageMaker::ComputeQuota"


def task_governance(design: Governance | None) -> Footprint:
    """`HyperPodTaskGovernance`: the add-on, the cluster policy, a compute allocation per team; nothing without."""
    if design is None:
        return Counter()
    return Counter({ADDON: 1, SCHEDULER_CONFIG: 1, COMPUTE_QUOTA: len(design.teams)})


KUBERNETES_OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
STATE_MACHINE = "AWS::StepFunctions::StateMachine"


def hyperpod_autoscaling_ready() -> Footprint:
    """`HyperPodAutoscalingReady`: its custom resource, its two handler functions (one role and policy, its log
    group), and CDK's Provider framework with a waiter: the onEvent, isComplete and onTimeout functions (a role and
    policy each, the provider log group the construct gives them) and the waiter state machine (role, policy)."""
    return Counter(
        {
            "Custom::HyperPodAutoscalingReady": 1,
            FUNCTION: 2 + 3,
            LOG_GROUP: 2,
            ROLE: 1 + 3 + 1,
            POLICY: 1 + 3 + 1,
            STATE_MACHINE: 1,
        }
    )


def hyperpod_autoscaling(design: Autoscaling | None) -> Footprint:
    """`HyperPodCluster(autoscaling=True)`'s cluster role and policy, and `add_hyperpod_pools`' wait for the
    cluster's autoscaling (`HyperPodAutoscalingReady`), its wait for the HyperpodNodeClass CRD (a kubectl get) and
    its one manifest of HyperpodNodeClasses and NodePools; nothing without autoscaling."""
    if design is None:
        return Counter()
    return (
        Counter({ROLE: 1, POLICY: 1, KUBERNETES_RESOURCE: 1, KUBERNETES_OBJECT_VALUE: 1}) + hyperpod_autoscaling_ready()
    )
