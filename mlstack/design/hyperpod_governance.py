"""HyperPod task governance and HyperPod autoscaling of a blueprint (engine hyperpod-eks). No CDK.

Task governance (`training.teams`): the EKS add-on `amazon-sagemaker-hyperpod-taskgovernance` (it installs Kueue and
manages its objects), one cluster policy (AWS::SageMaker::ClusterSchedulerConfig: priority classes inference >
training > experiments, fair share on) and one compute allocation per team (AWS::SageMaker::ComputeQuota: the team's
accelerators per instance type, lend and borrow idle compute, preempt its own lower-priority tasks, a fair-share
weight). HyperPod creates the team's namespace `hyperpod-ns-<team>` and its LocalQueue; a job names both (SageMaker
HyperPod docs, "SageMaker HyperPod task governance", "Policies", and the CLI examples page).

Autoscaling (`capacity_manager: karpenter`): the HyperPod cluster with AutoScaling {Mode Enable, AutoScalerType
Karpenter}, a ClusterRole HyperPod assumes to add and remove nodes, continuous node provisioning, instance groups at 0
nodes; a HyperpodNodeClass naming the instance groups and a Karpenter NodePool on it (SageMaker HyperPod docs,
"Autoscaling on SageMaker HyperPod EKS", "Create a NodeClass", "Create a NodePool").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog.quotes import Quote, instance_quote
from mlstack.config.training import TrainingConfig
from mlstack.config.training_elastic import (
    hyperpod_local_queue,
    hyperpod_priority_class,
    hyperpod_team_namespace,
)
from mlstack.config.training_engines import HyperPodConfig
from mlstack.config.training_hyperpod_rules import hyperpod_autoscaling
from mlstack.k8s.kube import job_cpu, job_memory_gib

PRIORITY_WEIGHTS: dict[str, int] = {"inference": 100, "training": 50, "experiments": 10}
"""Cluster-policy priority classes and weights (0-100, CreateClusterSchedulerConfig PriorityClass.Weight): inference
above training above experiments. A job without a priority class ranks 0, below all of them."""
MAX_BORROW_PERCENT = 500
"""ResourceSharingConfig.BorrowLimit: 1-500 percent of the team's quota ("ResourceSharingConfig", API reference)."""
NODE_CLASS = "mlstack-hyperpod"
NODE_POOL = "mlstack-hyperpod"


@dataclass(frozen=True)
class Allocation:
    """A team's accelerators of one instance type (ComputeQuotaResources; borrow: AbsoluteBorrowLimits).

    `node_vcpus`, `node_memory_gib`: what one training pod requests on a node of the type (`mlstack.k8s.kube.job_cpu`,
    `job_memory_gib`: the node less its system share). The quota's VCpu and MemoryInGiB are that per node, in
    proportion to the accelerators: a team's job at its quota then fits its CPU and memory. Explicit, because without
    them SageMaker derives both from the team's share of the cluster's accelerators now
    (API_ComputeQuotaResourceConfig: "ratio-based values"), and an autoscaled cluster starts with 0 nodes."""

    instance_type: str
    accelerators: int
    per_node: int
    borrow: int | None
    node_vcpus: int = 0
    node_memory_gib: int = 0

    def _share(self, accelerators: int, per_node_value: int) -> int:
        return accelerators * per_node_value // self.per_node if self.per_node else 0

    @property
    def vcpu(self) -> int:
        return self._share(self.accelerators, self.node_vcpus)

    @property
    def memory_gib(self) -> int:
        return self._share(self.accelerators, self.node_memory_gib)

    @property
    def borrow_vcpu(self) -> int:
        return self._share(self.borrow or 0, self.node_vcpus)

    @property
    def borrow_memory_gib(self) -> int:
        return self._share(self.borrow or 0, self.node_memory_gib)

    def quote(self, region: str) -> Quote:
        """$/h of the allocation when in use: whole nodes at the HyperPod rate of the catalog (none today: unpriced,
        with the reason, never the EC2 rate)."""
        return instance_quote(self.instance_type, region, "hyperpod")

    @property
    def nodes(self) -> int:
        return math.ceil(self.accelerators / self.per_node) if self.per_node else 0


@dataclass(frozen=True)
class TeamQuota:
    name: str
    weight: int
    priority: str
    allocations: tuple[Allocation, ...]

    @property
    def namespace(self) -> str:
        return hyperpod_team_namespace(self.name)

    @property
    def local_queue(self) -> str:
        return hyperpod_local_queue(self.name)

    @property
    def priority_class(self) -> str:
        return hyperpod_priority_class(self.priority)

    @property
    def strategy(self) -> str:
        """LendAndBorrow, or Lend when every borrowing limit is 0 (the team lends its idle quota, borrows none)."""
        if all(a.borrow == 0 for a in self.allocations):
            return "Lend"
        return "LendAndBorrow"

    @property
    def borrow_percent(self) -> int | None:
        """BorrowLimit: the largest borrowing limit as a percent of its quota (rounded up, 1-500); None when the
        absolute limits say all (a team with no nominal quota borrows by its absolute limits only)."""
        percents = [math.ceil(100 * a.borrow / a.accelerators) for a in self.allocations if a.borrow and a.accelerators]
        unlimited = any(a.borrow is None for a in self.allocations)
        if unlimited:
            return MAX_BORROW_PERCENT
        return min(MAX_BORROW_PERCENT, max(percents)) if percents else None

    @property
    def absolute_borrow(self) -> tuple[Allocation, ...]:
        """AbsoluteBorrowLimits: each limit the blueprint sets, in accelerators of its instance type (with the CPU
        and memory of those accelerators' nodes: `Allocation.borrow_vcpu`, `borrow_memory_gib`)."""
        return tuple(a for a in self.allocations if a.borrow)


@dataclass(frozen=True)
class Governance:
    addon: str
    teams: tuple[TeamQuota, ...]
    priority_classes: tuple[tuple[str, int], ...]

    def team(self, name: str | None) -> TeamQuota:
        return next(t for t in self.teams if t.name == (name or self.teams[0].name))


ADDON = "amazon-sagemaker-hyperpod-taskgovernance"


def governance(training: TrainingConfig) -> Governance | None:
    """The blueprint's task governance; None unless engine hyperpod-eks with teams."""
    if training.engine != "hyperpod-eks" or not training.teams:
        return None
    groups = {g.name: g for g in training.node_groups}
    teams = []
    for team in training.teams:
        merged: dict[str, list[int | None]] = {}
        per_node: dict[str, int] = {}
        node_share: dict[str, tuple[int, int]] = {}
        for quota in team.quotas:
            group = groups[quota.node_group]
            ml = f"ml.{group.instance.name}"
            accel = group.instance.accelerator
            per_node[ml] = accel.count if accel else 0
            node_share[ml] = (job_cpu(group.instance), job_memory_gib(group.instance))
            nominal, borrow = merged.get(ml, [0, 0])
            limit = None if borrow is None or quota.borrowing_limit is None else borrow + quota.borrowing_limit
            merged[ml] = [(nominal or 0) + quota.accelerators, limit]
        allocations = tuple(
            Allocation(ml, int(n or 0), per_node[ml], b, *node_share[ml]) for ml, (n, b) in sorted(merged.items())
        )
        teams.append(TeamQuota(team.name, int(team.weight), team.priority, allocations))
    return Governance(ADDON, tuple(teams), tuple(PRIORITY_WEIGHTS.items()))


@dataclass(frozen=True)
class Autoscaling:
    node_class: str
    node_pool: str
    instance_groups: tuple[str, ...]
    max_nodes: tuple[tuple[str, str, int], ...]
    """(instance group, ml type, max nodes): Karpenter's limit per group, what the plan prices as the maximum."""
    consolidate_after_minutes: int
    termination_grace_period_minutes: int


def autoscaling(training: TrainingConfig) -> Autoscaling | None:
    """HyperPod's managed Karpenter; None unless engine hyperpod-eks with capacity_manager karpenter."""
    if not hyperpod_autoscaling(training):
        return None
    settings = training.karpenter
    groups = tuple(g.name for g in training.node_groups)
    return Autoscaling(
        node_class=NODE_CLASS,
        node_pool=NODE_POOL,
        instance_groups=groups,
        max_nodes=tuple((g.name, f"ml.{g.instance.name}", g.max_size) for g in training.node_groups),
        consolidate_after_minutes=settings.consolidate_after_minutes if settings else 30,
        termination_grace_period_minutes=settings.termination_grace_period_minutes if settings else 60,
    )


def continuous_provisioning(training: TrainingConfig) -> bool:
    """HyperPod continuous node provisioning: for autoscaling (required) or a customer-managed volume key."""
    hyperpod = training.hyperpod or HyperPodConfig()
    return hyperpod_autoscaling(training) or hyperpod.customer_volume_key(training.engine)
