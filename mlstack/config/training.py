"""The `training:` section of a blueprint (TrainingClusterStack): an EKS cluster, accelerated node groups, FSx.

Rules that need only one part of this section live with that part: the cluster, system and accelerated node groups
and their capacity (`training_cluster`: EFA on an instance without EFA, a placement group with a reservation, Spot
with multi-node EFA, node counts), FSx (`training_fsx`), the engines other than EKS (`training_engines`); their
names are importable from here as well. Defined here: the model and example job, and `TrainingConfig`, whose
validators check what spans node groups and the job. Rules that need the whole blueprint (the AZ must be one of
the network's zones) are in `BlueprintConfig` (`mlstack/config/blueprint.py`), which calls
`TrainingConfig.check_zones`. Sources of the domain rules: EC2 User Guide (EFA) and the FSx for Lustre User Guide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog.memory import MAX_PARAMS
from mlstack.config.base import StrictModel, email_addresses
from mlstack.config.training_cluster import (
    HYPERPOD_KUBERNETES_VERSIONS,
    RESERVATION_KINDS,
    CapacityConfig,
    CapacityKind,
    ClusterConfig,
    KubernetesVersion,
    NodeGroupConfig,
    SupportType,
    SystemNodeGroupConfig,
    construct_id,
)
from mlstack.config.training_elastic import CapacityManager, KarpenterConfig, TeamConfig
from mlstack.config.training_engines import BatchConfig, Engine, HyperPodConfig
from mlstack.config.training_fsx import (
    ALL_REPOSITORY_EVENTS,
    PERSISTENT_2_THROUGHPUT,
    DataRepositoryConfig,
    FsxConfig,
    FsxDeployment,
    RepositoryEvent,
)
from mlstack.config.training_job import HYPERPOD_JOB_NAMESPACE, SHIPPED_SCRIPT

if TYPE_CHECKING:
    from mlstack.config.network import NetworkConfig

__all__ = [
    "ALL_REPOSITORY_EVENTS",
    "HYPERPOD_KUBERNETES_VERSIONS",
    "PERSISTENT_2_THROUGHPUT",
    "RESERVATION_KINDS",
    "SHIPPED_SCRIPT",
    "CapacityConfig",
    "CapacityKind",
    "ClusterConfig",
    "DataRepositoryConfig",
    "FsxConfig",
    "FsxDeployment",
    "JobConfig",
    "KubernetesVersion",
    "ModelConfig",
    "NodeGroupConfig",
    "RepositoryEvent",
    "SupportType",
    "SystemNodeGroupConfig",
    "TrainingConfig",
    "construct_id",
]


class ModelConfig(StrictModel):
    """The model the cluster is meant for; only used for a memory-fit warning in `plan` and at synth.

    The fit is `mlstack.catalog.fit.training_fit`, the estimate `mlstack advise train` uses: model states, activations
    (sequence length 4096, micro-batch 1, full checkpointing) and ZeRO-3 gathered weights per device, against 85% of
    the device's memory."""

    params: float = Field(gt=0, le=MAX_PARAMS)
    """Parameter count, e.g. 7e9 (at most the memory model's limit, 1e14)."""
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    zero_stage: Literal[0, 1, 2, 3] = 3
    """ZeRO / FSDP sharding stage across all accelerators of the node group (FULL_SHARD = 3)."""


class JobConfig(StrictModel):
    """The example multi-node job: `mlstack plan` prints it and the deploy puts it on the cluster (ConfigMap
    `mlstack-job` in the job namespace) with the image it will run."""

    name: str = Field(default="train", pattern=r"^[a-z][a-z0-9-]{0,40}[a-z0-9]$")
    image: str | None = None
    """Training image (EFA, libfabric and aws-ofi-nccl, or the Neuron SDK). Unset (the default): `cdk deploy` builds
    runtime/containers/train.Dockerfile (an AWS Deep Learning Container plus DeepSpeed and the reference script)
    and pushes it to the CDK bootstrap repository. A stock image with the shipped script is an error."""
    script: str = SHIPPED_SCRIPT
    """Entry point passed to torchrun; the default is the reference script baked into the image built from
    runtime/containers/train.Dockerfile (DDP/FSDP/DeepSpeed, checkpoints on FSx). CUDA or CPU only: a Neuron node
    group needs a script (and image) of your own."""
    node_group: str | None = None
    """Node group the job runs on; default: the first EFA group."""
    nodes: int | None = Field(default=None, ge=1)
    """Nodes per job; default: the node group's max_size."""
    namespace: str = Field(default="training", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    """Job namespace (created by the deploy). Default `training`, on engine hyperpod-eks `hyperpod-training`:
    HyperPod job auto-resume only acts on jobs in `kubeflow` or a namespace starting with `hyperpod`."""
    max_retries: int = Field(default=3, ge=1, le=100)
    """Restarts after a failure that is not an application error (mlstack.workloads.resilience): eks, the JobSet's
    failurePolicy.maxRestarts (disruptions do not count); hyperpod-eks, HyperPod job auto-resume's
    sagemaker.amazonaws.com/job-max-retry-count and the PyTorchJob's backoffLimit; batch, retryStrategy attempts
    minus one (at most 9)."""
    team: str | None = None
    """With `teams`: the team whose Kueue queue the job is submitted to (default: the first team)."""


class TrainingConfig(StrictModel):
    """A training cluster on EKS (default), SageMaker HyperPod with Slurm, or AWS Batch multi-node parallel."""

    engine: Engine = "eks"
    """Which service runs the node groups (`mlstack/config/training_engines.py`); the stack ID is the same."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    system_node_group: SystemNodeGroupConfig = Field(default_factory=SystemNodeGroupConfig)
    node_groups: list[NodeGroupConfig] = Field(min_length=1)
    fsx: FsxConfig | None = Field(default_factory=FsxConfig)
    """FSx for Lustre in the training AZ; null for none."""
    model: ModelConfig | None = None
    job: JobConfig = Field(default_factory=JobConfig)
    max_nodes: int = Field(default=16, ge=1, le=2048)
    """Ceiling on accelerated nodes (sum of node groups' max_size): a guard against a costly typo."""
    hyperpod: HyperPodConfig | None = None
    """Engines hyperpod-slurm and hyperpod-eks: instance groups, lifecycle scripts (default settings when omitted)."""
    batch: BatchConfig | None = None
    """Engine batch: job queue, job definition and logs (default settings when omitted)."""
    alarm_emails: list[str] = Field(default_factory=list, max_length=20)
    """Addresses subscribed to the training stack's alarm topic (each confirms by e-mail): the cluster's alarms,
    the budget's notifications and Capacity Block expiry warnings go there (output `AlarmTopicArn`)."""

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        return email_addresses("alarm_emails", value)

    capacity_manager: CapacityManager = "node_groups"
    """`node_groups` (default): fixed-size managed node groups. `karpenter` (engine eks): Karpenter launches each
    accelerated group's nodes for pending jobs, up to max_size, and removes them once empty
    (`mlstack/config/training_elastic.py`); on engine hyperpod-eks, HyperPod's managed Karpenter does that with the
    instance groups (`mlstack/config/training_hyperpod_rules.py`)."""
    karpenter: KarpenterConfig | None = None
    """capacity_manager karpenter: drain and scale-in settings, pool overrides (defaults when omitted)."""
    teams: list[TeamConfig] = Field(default_factory=list)
    """Kueue: a ClusterQueue per team with quotas in accelerators, in one cohort with fair sharing; jobs wait in
    their team's queue until all their nodes' worth of quota is free. On engine hyperpod-eks: HyperPod task
    governance, a compute allocation per team (`mlstack/design/hyperpod_governance.py`)."""

    @model_validator(mode="before")
    @classmethod
    def _engine_namespace(cls, data: Any) -> Any:
        """hyperpod-eks: the job namespace defaults to one HyperPod job auto-resume watches."""
        if isinstance(data, dict) and data.get("engine") == "hyperpod-eks":
            job = data.get("job")
            if job is None or (isinstance(job, dict) and "namespace" not in job):
                data = {**data, "job": {**(job or {}), "namespace": HYPERPOD_JOB_NAMESPACE}}
        return data

    @model_validator(mode="after")
    def _groups(self) -> TrainingConfig:
        names = [g.name for g in self.node_groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node_groups: names must be unique, {', '.join(dupes)} repeated; rename them")
        ids: dict[str, str] = {}
        for name in names:
            other = ids.setdefault(construct_id(name), name)
            if other != name:
                raise ValueError(
                    f"node_groups: names {other!r} and {name!r} differ only by hyphens and give the same construct ID "
                    f"{construct_id(name)!r}; rename one"
                )
        total = sum(g.max_size for g in self.node_groups)
        if total > self.max_nodes:
            raise ValueError(
                f"node_groups allow {total} nodes in all (sum of max_size) but max_nodes is {self.max_nodes}; "
                "lower max_size or raise max_nodes deliberately"
            )
        if self.job.node_group is not None and self.job.node_group not in names:
            raise ValueError(
                f"job.node_group {self.job.node_group!r} is not a node group; use one of {', '.join(names)}"
            )
        if self.job.nodes is not None and self.job.nodes > self.job_group.max_size:
            raise ValueError(
                f"job.nodes {self.job.nodes} exceeds node group {self.job_group.name!r} max_size "
                f"{self.job_group.max_size}; lower job.nodes or raise max_size"
            )
        return self

    @property
    def efa_groups(self) -> list[NodeGroupConfig]:
        return [g for g in self.node_groups if g.efa]

    @property
    def job_group(self) -> NodeGroupConfig:
        if self.job.node_group is not None:
            return next(g for g in self.node_groups if g.name == self.job.node_group)
        return (self.efa_groups or self.node_groups)[0]

    def zones_of(self, group: NodeGroupConfig, zones: list[str]) -> list[str]:
        """The AZs of `group` (its own, or the network's first)."""
        return list(group.availability_zones or zones[:1])

    def zone_of(self, group: NodeGroupConfig, zones: list[str]) -> str:
        """The (first) AZ of `group`; the only one for an EFA group."""
        return self.zones_of(group, zones)[0]

    def fsx_zone(self, zones: list[str]) -> str:
        """The AZ of the file system: its own, else the EFA group's, else the network's first."""
        if self.fsx is not None and self.fsx.availability_zone:
            return self.fsx.availability_zone
        groups = self.efa_groups or self.node_groups
        return self.zone_of(groups[0], zones)

    def check_network(self, network: NetworkConfig) -> list[str]:
        """Cross-section rule (called by BlueprintConfig): the cluster needs outbound internet through NAT."""
        if network.nat_gateways == 0:
            return [
                "network.nat_gateways: 0 makes the private subnets isolated, but the training cluster's Helm charts "
                "come from public repositories (nvidia.github.io, aws.github.io, ghcr.io, public.ecr.aws), fetched at "
                "deploy time by the kubectl handler in the VPC; use nat_gateways: 1 or more"
            ]
        return []

    def check_zones(self, zones: list[str]) -> list[str]:
        """Cross-section rules (called by BlueprintConfig): problems, one line each, empty when fine."""
        problems: list[str] = []
        listed = ", ".join(zones)
        if len(zones) < 2:
            problems.append(
                f"network: the EKS control plane needs subnets in at least two AZs, the network has {len(zones)} "
                f"({listed}); add a second zone (EFA node groups still use one)"
            )
        for i, group in enumerate(self.node_groups):
            for zone in group.availability_zones or []:
                if zone not in zones:
                    problems.append(
                        f"training.node_groups.{i}.availability_zones: {zone!r} is not one of the network's zones "
                        f"({listed}); use one of them"
                    )
        if self.fsx is not None and self.fsx.availability_zone is not None and self.fsx.availability_zone not in zones:
            problems.append(
                f"training.fsx.availability_zone: {self.fsx.availability_zone!r} is not one of the network's zones "
                f"({listed}); use one of them"
            )
        efa_zones = sorted({self.zone_of(g, zones) for g in self.efa_groups})
        if len(efa_zones) > 1:
            problems.append(
                f"training.node_groups: EFA node groups span several AZs ({', '.join(efa_zones)}); EFA traffic does "
                "not cross AZs or subnets: put every EFA group in one availability_zone"
            )
        if self.fsx is not None and efa_zones:
            fsx_zone = self.fsx_zone(zones)
            if fsx_zone != efa_zones[0]:
                problems.append(
                    f"training.fsx.availability_zone: {fsx_zone!r} differs from the EFA node group's AZ "
                    f"{efa_zones[0]!r}; put FSx in the same AZ (cross-AZ Lustre traffic is slow and billed)"
                )
        return problems
