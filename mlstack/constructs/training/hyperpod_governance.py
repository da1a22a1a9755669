"""`HyperPodTaskGovernance`: SageMaker HyperPod task governance on an EKS-orchestrated HyperPod cluster. The EKS
add-on `amazon-sagemaker-hyperpod-taskgovernance` (it installs Kueue and reconciles the objects below into it), one
cluster policy (AWS::SageMaker::ClusterSchedulerConfig) and one compute allocation per team
(AWS::SageMaker::ComputeQuota). HyperPod creates each team's namespace `hyperpod-ns-<team>` and LocalQueue
`hyperpod-ns-<team>-localqueue`, and a priority class `<name>-priority` per cluster-policy class (SageMaker HyperPod
docs, "SageMaker HyperPod task governance", "Example HyperPod task governance AWS CLI commands").

aws-cdk-lib 2.275 has no L1 for AWS::SageMaker::ComputeQuota (CfnComputeQuota came in 2.276): the allocations are
`CfnResource`s, their properties those of the CloudFormation schema (which cfn-lint validates).

Usable from any CDK app::

    HyperPodTaskGovernance(stack, "TaskGovernance", cluster=eks_cluster, hyperpod_cluster_arn=hp.cluster_arn,
                           name="my-cluster", priority_classes=[("training", 50)],
                           teams=[TeamAllocation(name="research", weight=1, resources=[("ml.p5.48xlarge", 16)])])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aws_cdk import Acknowledgment, CfnResource, Validations
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack.constructs.training import versions

Strategy = Literal["Lend", "DontLend", "LendAndBorrow"]


@dataclass(frozen=True)
class ComputeResource:
    """Compute of one instance type (ComputeQuotaResourceConfig): `accelerators`, and the `vcpu` and `memory_gib`
    that come with them (default none: SageMaker then derives both from the team's share of the cluster's
    accelerators at that moment, "ratio-based values", which on a cluster at 0 nodes is a share of nothing)."""

    instance_type: str
    accelerators: int
    vcpu: int | None = None
    memory_gib: int | None = None

    def to_cfn(self) -> dict[str, object]:
        found: dict[str, object] = {"InstanceType": self.instance_type, "Accelerators": self.accelerators}
        if self.vcpu is not None:
            found["VCpu"] = self.vcpu
        if self.memory_gib is not None:
            found["MemoryInGiB"] = self.memory_gib
        return found


def _resource(item: ComputeResource | tuple[str, int]) -> ComputeResource:
    return item if isinstance(item, ComputeResource) else ComputeResource(item[0], item[1])


@dataclass(frozen=True)
class TeamAllocation:
    """A team's compute allocation.

    - `resources`: what the team is guaranteed: `ComputeResource`s, or (ml instance type, accelerators).
    - `weight`: fair-share weight, 0-100 (default 1).
    - `strategy`: how it shares idle compute (default `LendAndBorrow`).
    - `borrow_percent`: BorrowLimit, 1-500 percent of its quota it may borrow (default none: the service's 50).
    - `absolute_borrow`: caps on what it borrows, like `resources` (default none).
    - `preempt`: `LowerPriority` (default) lets its higher-priority tasks preempt its own lower ones; `Never`.
    """

    name: str
    resources: Sequence[ComputeResource | tuple[str, int]]
    weight: int = 1
    strategy: Strategy = "LendAndBorrow"
    borrow_percent: int | None = None
    absolute_borrow: Sequence[ComputeResource | tuple[str, int]] = field(default_factory=tuple)
    preempt: Literal["Never", "LowerPriority"] = "LowerPriority"


class HyperPodTaskGovernance(Construct):
    """The task-governance add-on, the cluster policy and the teams' compute allocations.

    Props (keyword):
    - `cluster`: the EKS cluster that orchestrates the HyperPod cluster (it must run no Kueue of its own: the add-on
      refuses to install over one).
    - `hyperpod_cluster_arn`: the HyperPod cluster (ARN with its generated ID).
    - `name`: prefix of the policy's and the allocations' names (`<name>-policy`, `<name>-<team>`; at most 63
      characters each).
    - `priority_classes`: (name, weight 0-100), highest first; a job names one as `<name>-priority`.
    - `teams`: the compute allocations.
    - `fair_share`: teams borrow idle compute in proportion to their weights (default True).
    - `addon_version`: of the task-governance add-on (default `versions.HYPERPOD_TASK_GOVERNANCE_VERSION`).
    - `tags`: on each compute allocation (default none). An allocation is a raw `CfnResource` (no L1 in this
      aws-cdk-lib), which the stack's `Tags.of` does not reach.

    The allocations are created one after another, in the order of `teams`: each updates the same cluster's Kueue
    configuration and cohort, and an update that conflicts with another would roll back the whole create.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        hyperpod_cluster_arn: str,
        name: str,
        priority_classes: Sequence[tuple[str, int]],
        teams: Sequence[TeamAllocation],
        fair_share: bool = True,
        addon_version: str = versions.HYPERPOD_TASK_GOVERNANCE_VERSION,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not teams:
            raise ValueError("teams: task governance needs at least one team's compute allocation")
        for label in [f"{name}-policy", *(f"{name}-{t.name}" for t in teams)]:
            if len(label) > 63:
                raise ValueError(f"name: {label!r} is longer than the 63 characters SageMaker takes; shorten name")
        self.addon = eks.Addon(
            self,
            "Addon",
            cluster=cluster,
            addon_name=versions.HYPERPOD_TASK_GOVERNANCE,
            addon_version=addon_version,
        )
        # SageMaker writes the policy and the allocations into the add-on's Kueue through the cluster's access
        # entry (the create handlers call eks:AssociateAccessPolicy): the add-on must be there first.
        self.policy = sagemaker.CfnClusterSchedulerConfig(
            self,
            "ClusterPolicy",
            name=f"{name}-policy",
            cluster_arn=hyperpod_cluster_arn,
            description="mlstack: task priorities and fair sharing of idle compute",
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=n, weight=w)
                    for n, w in priority_classes
                ],
                fair_share="Enabled" if fair_share else "Disabled",
                idle_resource_sharing="Enabled",
            ),
        )
        self.policy.node.add_dependency(self.addon)
        self.quotas: dict[str, CfnResource] = {}
        previous: CfnResource | None = None
        for team in teams:
            sharing: dict[str, object] = {"Strategy": team.strategy}
            if team.borrow_percent is not None:
                sharing["BorrowLimit"] = team.borrow_percent
            if team.absolute_borrow:
                sharing["AbsoluteBorrowLimits"] = [_resource(r).to_cfn() for r in team.absolute_borrow]
            quota = CfnResource(
                self,
                f"Team{''.join(p.capitalize() for p in team.name.split('-'))}",
                type="AWS::SageMaker::ComputeQuota",
                properties={
                    "Name": f"{name}-{team.name}",
                    "ClusterArn": hyperpod_cluster_arn,
                    "Description": f"mlstack: compute allocation of team {team.name}",
                    "ActivationState": "Enabled",
                    "ComputeQuotaTarget": {"TeamName": team.name, "FairShareWeight": team.weight},
                    "ComputeQuotaConfig": {
                        "ComputeQuotaResources": [_resource(r).to_cfn() for r in team.resources],
                        "ResourceSharingConfig": sharing,
                        "PreemptTeamTasks": team.preempt,
                    },
                    **({"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]} if tags else {}),
                },
            )
            Validations.of(quota).acknowledge(
                Acknowledgment(
                    id="CloudFormation-Validate::F3006",
                    reason=(
                        "AWS::SageMaker::ComputeQuota is a CloudFormation type (its schema is in cfn-lint 1.58, which "
                        "validates these properties) that the schemas bundled with aws-cdk-lib 2.275 predate"
                    ),
                )
            )
            # The cluster policy's priority classes and fair share first: an allocation's weight means something
            # only under it, and the two share the add-on's Kueue configuration.
            quota.node.add_dependency(self.policy)
            # One allocation at a time: a minute more on the create, and no two concurrent updates of one cluster.
            if previous is not None:
                quota.node.add_dependency(previous)
            previous = quota
            self.quotas[team.name] = quota
