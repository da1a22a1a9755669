"""Kueue queues of a blueprint (`training.teams`): what the cluster gets and what each team's quota costs. No CDK.

- A ResourceFlavor per accelerated node group (its nodes by the `mlstack.io/node-group` label).
- A ClusterQueue per team, nominal and borrowing quotas in accelerators, all in one cohort with fair sharing (Kueue
  docs v0.19, "Fair Sharing"); a team reclaims its nominal quota by preempting borrowers.
- A LocalQueue per team in the job namespace (what a job names in `kueue.x-k8s.io/queue-name`).
- WorkloadPriorityClasses and PriorityClasses: inference above training above experiments.
- Topology-aware scheduling on the EKS network-topology labels, for flavors whose nodes exist before admission
  (node groups): Kueue places a workload on nodes it sees, and a Karpenter pool has none until a workload is
  admitted, so a topology request there would never be admitted (Kueue docs, "Topology Aware Scheduling").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog.prices import price as ec2_price
from mlstack.config.training import TrainingConfig
from mlstack.config.training_elastic import PRIORITY_VALUES
from mlstack.k8s.kube import EFA_TAINT, accelerator_resource, accelerator_taint_key

COHORT = "mlstack"
TOPOLOGY = "eks-network"
TOPOLOGY_LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
)
"""EKS network-topology node labels, broadest first (EKS User Guide, "Place distributed AI/ML workloads with network
topology labels": https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html), then the node."""
PREFERRED_LEVEL = TOPOLOGY_LEVELS[2]
"""A job asks for its pods under one layer-3 network node if possible (annotation podset-preferred-topology)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
UNMANAGED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "vpc.amazonaws.com/efa")
"""Resources Kueue leaves out of quota (Configuration `resources.excludeResourcePrefixes`): quotas count
accelerators only, and a job's CPU, memory, huge pages and EFA devices come with its nodes."""

PODS_READY_TIMEOUT_MINUTES = 30
"""An admitted workload whose pods are not all ready within this time is evicted (Configuration
`waitForPodsReady.timeout`): a p5 launch plus the training image's pull take well under it, and a gang one of whose
nodes EC2 cannot launch (insufficient capacity) gives back its quota and the nodes it got."""
REQUEUE_LIMIT = 3
"""Evictions for pods not ready before Kueue deactivates the workload (`requeuingStrategy.backoffLimitCount`; Kueue's
default, null, requeues forever: a partly launched gang could then hold a p5 without end)."""
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 3600
"""The requeue delay after the n-th eviction is about base * 2^(n-1) (plus jitter), at most max (Kueue v0.19 config
v1beta2 `RequeuingStrategy`: the defaults, written out)."""


def longest_unready_hold_minutes() -> float:
    """The longest time a workload whose pods never all get ready holds its quota and nodes, backoffs included
    (during a backoff the nodes it got sit empty until `consolidate_after_minutes`): the first admission and each
    requeue wait the timeout, then the workload is deactivated."""
    backoffs = sum(min(BACKOFF_BASE_SECONDS << n, BACKOFF_MAX_SECONDS) for n in range(REQUEUE_LIMIT))
    return (REQUEUE_LIMIT + 1) * PODS_READY_TIMEOUT_MINUTES + backoffs / 60


@dataclass(frozen=True)
class Quota:
    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    per_node: int
    node_type: str

    def per_hour(self) -> float | None:
        """$/h of the nominal quota when in use: whole nodes at the catalog's on-demand price."""
        dated = ec2_price(self.node_type)
        if dated is None or self.per_node == 0:
            return None
        return math.ceil(self.nominal / self.per_node) * dated.usd_per_hour


@dataclass(frozen=True)
class Team:
    name: str
    weight: float
    priority: str
    quotas: tuple[Quota, ...]

    @property
    def local_queue(self) -> str:
        return self.name

    @property
    def cluster_queue(self) -> str:
        return f"team-{self.name}"


@dataclass(frozen=True)
class Flavor:
    name: str
    node_group: str
    resource: str
    taints: tuple[str, ...]
    topology: bool


@dataclass(frozen=True)
class Queues:
    namespace: str
    flavors: tuple[Flavor, ...]
    teams: tuple[Team, ...]

    def team(self, name: str | None) -> Team:
        return next(t for t in self.teams if t.name == (name or self.teams[0].name))


def queues(training: TrainingConfig) -> Queues | None:
    """The blueprint's Kueue objects; None without teams."""
    if not training.teams:
        return None
    groups = {g.name: g for g in training.node_groups}
    used = [g for g in training.node_groups if any(q.node_group == g.name for t in training.teams for q in t.quotas)]
    flavors = []
    for group in used:
        it = group.instance
        resource = accelerator_resource(it)
        assert resource is not None  # config rejects quotas on groups without accelerators
        taints = tuple(k for k in (accelerator_taint_key(it), EFA_TAINT if group.efa else None) if k)
        flavors.append(Flavor(group.name, group.name, resource, taints, training.capacity_manager == "node_groups"))
    teams = []
    for team in training.teams:
        quotas = []
        for q in team.quotas:
            it = groups[q.node_group].instance
            per_node = it.accelerator.count if it.accelerator else 0
            resource = accelerator_resource(it) or ""
            quotas.append(Quota(q.node_group, resource, q.accelerators, q.borrowing_limit, per_node, it.name))
        teams.append(Team(team.name, team.weight, team.priority, tuple(quotas)))
    return Queues(training.job.namespace, tuple(flavors), tuple(teams))


def priority_value(name: str) -> int:
    return PRIORITY_VALUES[name]
