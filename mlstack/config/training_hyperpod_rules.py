"""The rules of `teams:` and `capacity_manager: karpenter` on engine hyperpod-eks: HyperPod task governance (compute
allocations per team, a cluster policy) and HyperPod's managed Karpenter autoscaling. Every problem one line,
reported with the other elastic rules (`training_elastic_rules.elastic_problems`).

Sources: SageMaker HyperPod docs, "Autoscaling on SageMaker HyperPod EKS" and "Create a NodeClass" (continuous
provisioning, NodeRecovery Automatic, instance groups start at 0 nodes, on-demand capacity only: no training plan, no
deep health checks), "SageMaker HyperPod task governance"; CloudFormation AWS::SageMaker::ComputeQuota
(FairShareWeight an integer 0-100, TeamName `^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$`).
"""

from __future__ import annotations

from mlstack.config.training import NodeGroupConfig, TrainingConfig
from mlstack.config.training_elastic import hyperpod_team_namespace
from mlstack.config.training_engines import HyperPodConfig

MAX_TEAM_NAME = 40
"""ComputeQuotaTarget.TeamName: at most 40 characters (the CloudFormation pattern)."""
MAX_NODE_CLASS_GROUPS = 10
"""A HyperpodNodeClass lists at most 10 instance groups ("Create a NodeClass")."""


def hyperpod_autoscaling(training: TrainingConfig) -> bool:
    """HyperPod's managed Karpenter scales the instance groups (engine hyperpod-eks, capacity_manager karpenter)."""
    return training.engine == "hyperpod-eks" and training.capacity_manager == "karpenter"


def group_nodes(training: TrainingConfig, group: NodeGroupConfig) -> int:
    """Nodes a group can hold: a HyperPod instance group without autoscaling has exactly its InstanceCount
    (desired_size); a Karpenter pool or an autoscaled instance group up to max_size."""
    if training.engine == "hyperpod-eks" and not hyperpod_autoscaling(training):
        return group.desired_size
    return group.max_size


def autoscaling_problems(training: TrainingConfig) -> list[str]:
    """`capacity_manager: karpenter` on hyperpod-eks: what HyperPod's managed Karpenter takes."""
    if not hyperpod_autoscaling(training):
        return []
    hyperpod = training.hyperpod or HyperPodConfig()
    problems: list[str] = []
    if training.karpenter is not None and training.karpenter.pools:
        problems.append(
            "training.karpenter.pools: HyperPod's managed Karpenter launches the instance groups as they are (type, "
            "subnet, EFA); remove pools and change the node groups instead"
        )
    if hyperpod.deep_health_checks:
        problems.append(
            "training.hyperpod.deep_health_checks: true with capacity_manager karpenter; HyperPod autoscaling does "
            "not take instance groups with deep health checks (60-90 min per node while pods wait): set it to false"
        )
    if hyperpod.training_plan_arn:
        problems.append(
            "training.hyperpod.training_plan_arn: set with capacity_manager karpenter; HyperPod autoscaling launches "
            "on-demand capacity only (no training plan): remove training_plan_arn or use capacity_manager node_groups"
        )
    if hyperpod.node_recovery != "Automatic":
        problems.append(
            f"training.hyperpod.node_recovery: {hyperpod.node_recovery!r} with capacity_manager karpenter; HyperPod "
            "autoscaling needs Automatic node recovery: set node_recovery: Automatic"
        )
    if len(training.node_groups) > MAX_NODE_CLASS_GROUPS:
        problems.append(
            f"training.node_groups: {len(training.node_groups)} groups; a HyperpodNodeClass lists at most "
            f"{MAX_NODE_CLASS_GROUPS} instance groups: merge groups"
        )
    return problems


def team_problems(training: TrainingConfig) -> list[str]:
    """`teams:` on hyperpod-eks: compute allocations that task governance accepts, and a job it queues."""
    if training.engine != "hyperpod-eks" or not training.teams:
        return []
    problems: list[str] = []
    for team in training.teams:
        if len(team.name) > MAX_TEAM_NAME:
            problems.append(
                f"training.teams[{team.name}].name: {len(team.name)} characters; HyperPod task governance takes "
                f"team names of at most {MAX_TEAM_NAME}: shorten it"
            )
        if team.weight != int(team.weight):
            problems.append(
                f"training.teams[{team.name}].weight: {team.weight:g}; HyperPod's fair-share weight is a whole number "
                "from 1 to 100: round it"
            )
    job_team = training.job.team or training.teams[0].name
    expected = hyperpod_team_namespace(job_team)
    if training.job.team in (None, *(t.name for t in training.teams)) and training.job.namespace != expected:
        problems.append(
            f"training.job.namespace: {training.job.namespace!r} but task governance queues team {job_team!r}'s jobs "
            f"only in its namespace {expected!r} (its LocalQueue is there): set job.namespace: {expected}"
        )
    # Task governance allocates per instance type: quotas of groups of one type share that type's nodes.
    groups = {g.name: g for g in training.node_groups}
    capacity: dict[str, int] = {}
    for group in training.node_groups:
        accel = group.instance.accelerator
        if accel is not None:
            ml = f"ml.{group.instance.name}"
            capacity[ml] = capacity.get(ml, 0) + group_nodes(training, group) * accel.count
    allocated: dict[str, int] = {}
    for team in training.teams:
        for quota in team.quotas:
            quota_group = groups.get(quota.node_group)
            if quota_group is not None and quota_group.instance.accelerator is not None:
                ml = f"ml.{quota_group.instance.name}"
                allocated[ml] = allocated.get(ml, 0) + quota.accelerators
    for instance_type, total in sorted(allocated.items()):
        if total > capacity[instance_type]:
            problems.append(
                f"training.teams: quotas on {instance_type} add up to {total} accelerators but the cluster's "
                f"{instance_type} instance groups provide {capacity[instance_type]}; lower the quotas or add nodes"
            )
    return problems
