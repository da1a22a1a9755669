"""Elastic capacity and fair sharing of the `training:` section: `capacity_manager: karpenter` (node pools instead of
fixed-size node groups) and `teams:` (Kueue queues with quotas in accelerators).

Each accelerated node group becomes, under Karpenter, one NodePool and EC2NodeClass of the same instance type, AZ,
capacity and EFA layout; `karpenter.pools` may widen a pool (more instance types, capacity types, zones) and the rules
here (`training_elastic_rules.py`) keep such a pool launchable for a multi-node EFA job.
Sources: Karpenter docs (NodePools, Disruption, EC2NodeClasses) for v1.14, Kueue docs
(ClusterQueue, Fair Sharing, Topology Aware Scheduling) for v0.19, EC2 User Guide (EFA limitations: one subnet, one
AZ; Capacity Blocks).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import get_instance
from mlstack.config.base import StrictModel
from mlstack.errors import CatalogError

CapacityManager = Literal["node_groups", "karpenter"]
KarpenterCapacityType = Literal["on-demand", "spot", "reserved"]
"""Values of the `karpenter.sh/capacity-type` requirement (Karpenter NodePools: capacity type)."""
Priority = Literal["inference", "training", "experiments"]
PRIORITY_VALUES: dict[str, int] = {"inference": 1000, "training": 500, "experiments": 100}
"""WorkloadPriorityClass values: inference above training above experiments (a higher value is admitted first and
may preempt a lower one within a ClusterQueue or when reclaiming borrowed quota)."""

_NAME = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"


class PoolConfig(StrictModel):
    """Overrides of the NodePool generated for one node group (everything else comes from the group)."""

    node_group: str
    extra_instance_types: list[str] = Field(default_factory=list)
    """More instance types the pool may launch besides the group's (e.g. p5en.48xlarge next to p5.48xlarge)."""
    capacity_types: list[KarpenterCapacityType] | None = None
    """Default: the group's capacity (on_demand -> on-demand, spot -> spot, ODCR / Capacity Block -> reserved)."""
    availability_zones: list[str] | None = None
    """Default: the group's zone. An EFA pool takes exactly one."""

    @field_validator("extra_instance_types")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        try:
            return [get_instance(v).name for v in value]
        except CatalogError as err:
            raise ValueError(str(err).replace("\n", "; ")) from None


class KarpenterConfig(StrictModel):
    """Karpenter on the EKS engine (or HyperPod's managed Karpenter on hyperpod-eks, without `pools`): how its
    training pools scale in and drain (they never interrupt a job)."""

    consolidate_after_minutes: int = Field(default=30, ge=10, le=1440)
    """An empty node is removed this long after its last pod left (consolidation `WhenEmpty` only): at least ten
    minutes, so the next job of a queue reuses warm nodes instead of waiting for new ones."""
    checkpoint_interval_minutes: int = Field(default=30, ge=1, le=1440)
    """How often the training job checkpoints: a node drained for interruption or deletion waits at least this long
    (`termination_grace_period_minutes`) so the job can write one last checkpoint."""
    termination_grace_period_minutes: int = Field(default=60, ge=1, le=10080)
    """NodePool `terminationGracePeriod`: the longest a draining node waits for its pods (it overrides
    do-not-disrupt). At least `checkpoint_interval_minutes`."""
    pools: list[PoolConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _grace(self) -> KarpenterConfig:
        if self.termination_grace_period_minutes < self.checkpoint_interval_minutes:
            raise ValueError(
                f"karpenter.termination_grace_period_minutes {self.termination_grace_period_minutes} is shorter than "
                f"checkpoint_interval_minutes {self.checkpoint_interval_minutes}: a drained node would kill the job "
                "before its next checkpoint; raise termination_grace_period_minutes"
            )
        return self


class QuotaConfig(StrictModel):
    """A team's quota on one node group's accelerators (a Kueue flavor)."""

    node_group: str
    accelerators: int = Field(ge=0)
    """Nominal quota: accelerators the team is guaranteed (GPUs or Neuron devices; nodes x per-node count)."""
    borrowing_limit: int | None = Field(default=None, ge=0)
    """Accelerators it may borrow from the cohort's unused quota on top (None: up to what the cohort has)."""


class TeamConfig(StrictModel):
    """A team: one Kueue ClusterQueue (in the shared cohort) and a LocalQueue in the job namespace."""

    name: str = Field(pattern=_NAME)
    quotas: list[QuotaConfig] = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, le=100)
    """Fair-sharing weight: a team with twice the weight gets twice the share of borrowed capacity."""
    priority: Priority = "training"
    """The default WorkloadPriorityClass of the team's jobs."""


HYPERPOD_NAMESPACE_PREFIX = "hyperpod-ns-"
"""HyperPod task governance runs a team's jobs in namespace `hyperpod-ns-<team>`, which it creates with the team's
compute allocation, and queues them in that namespace's LocalQueue `hyperpod-ns-<team>-localqueue`; a job names its
priority class as `<class>-priority` (SageMaker HyperPod docs, "Example HyperPod task governance AWS CLI commands":
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-operate-console-ui-governance-cli.html)."""


def hyperpod_team_namespace(team: str) -> str:
    """The namespace task governance creates for `team` (CloudFormation AWS::SageMaker::ComputeQuota TeamName:
    "Materialized as Kubernetes namespace 'hyperpod-ns-<TeamName>'")."""
    return f"{HYPERPOD_NAMESPACE_PREFIX}{team}"


def hyperpod_local_queue(team: str) -> str:
    return f"{hyperpod_team_namespace(team)}-localqueue"


def hyperpod_priority_class(priority: str) -> str:
    return f"{priority}-priority"
