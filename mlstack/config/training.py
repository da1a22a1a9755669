"""The `training:` section of a blueprint (TrainingClusterStack): an EKS cluster, accelerated node groups, FSx.

Rules that need only this section live here (EFA on an instance without EFA, a placement group with a
reservation, Spot with multi-node EFA, FSx values, node counts). Rules that need the whole blueprint (the AZ
must be one of the network's zones) are in `BlueprintConfig` (`mlstack/config/blueprint.py`), which calls
`TrainingConfig.check_zones`. Sources of the domain rules: EC2 User Guide (EFA) and the FSx for Lustre User Guide.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import InstanceType, get_instance
from mlstack.catalog.memory import MAX_PARAMS
from mlstack.config.base import StrictModel, pascal_id
from mlstack.config.training_engines import BatchConfig, Engine, HyperPodConfig, engine_problems, engine_zone_problems
from mlstack.constructs.common import LOG_RETENTION_DAYS
from mlstack.errors import CatalogError

if TYPE_CHECKING:
    from mlstack.config.network import NetworkConfig

KubernetesVersion = Literal["1.35", "1.36"]
"""EKS versions this project builds for: AL2023 accelerated AMIs exist (no AL2 AMIs from 1.33), the default VPC CNI
add-on supports EFA-only interfaces (>= 1.18.5), and each is within one minor version of the kubectl layer (v1.36:
kubectl supports one minor version of skew with the API server, Kubernetes version skew policy). 1.33 and 1.34
are out of that skew; `KUBECTL_MINOR` and its test keep the two in step."""

KUBECTL_MINOR = 36
"""Minor version of the kubectl Lambda layer the cluster's custom resources run (aws-cdk.lambda-layer-kubectl-v36)."""

SupportType = Literal["STANDARD", "EXTENDED"]

CapacityKind = Literal["on_demand", "spot", "capacity_reservation", "capacity_block"]
"""How the node group gets instances: On-Demand, Spot, a targeted On-Demand Capacity Reservation (ODCR), or an
EC2 Capacity Block for ML (both reservation kinds are `cr-...` IDs)."""

RESERVATION_KINDS: frozenset[str] = frozenset({"capacity_reservation", "capacity_block"})

RepositoryEvent = Literal["NEW", "CHANGED", "DELETED"]
ALL_REPOSITORY_EVENTS: tuple[RepositoryEvent, ...] = ("NEW", "CHANGED", "DELETED")

FsxDeployment = Literal["PERSISTENT_2", "SCRATCH_2"]
PERSISTENT_2_THROUGHPUT = (125, 250, 500, 1000)
"""MB/s per TiB allowed for PERSISTENT_2 SSD ([BOTO] fsx CreateFileSystemLustreConfiguration)."""

_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_PLACEMENT_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


def construct_id(name: str) -> str:
    """The CDK construct ID prefix of a node group (`p5-a` -> `P5A`); used by TrainingClusterStack."""
    return pascal_id(name)


def _catalog_instance(value: str) -> str:
    """Validate an instance type against the catalog; unknown -> the catalog's message with close matches."""
    try:
        return get_instance(value).name
    except CatalogError as err:
        raise ValueError(str(err).replace("\n", "; ") + "; see `mlstack advise` for the catalog") from None


class ClusterConfig(StrictModel):
    """The EKS control plane."""

    kubernetes_version: KubernetesVersion = "1.35"
    endpoint_access: Literal["private", "public_and_private"] = "private"
    """`private`: the API server is reachable only from the VPC (cdk-nag EKS1). Public access is for labs only."""
    admin_host: bool = True
    """The out-of-the-box access path: an SSM-managed admin host (no inbound ports, no public IP) in a private
    subnet, with kubectl and a kubeconfig, given cluster-admin by an access entry. Reach it with
    `aws ssm start-session --target <instance id>` (the stack outputs the command)."""
    admin_principal_arns: list[str] = Field(default_factory=list)
    """IAM roles/users given cluster-admin through EKS access entries (AmazonEKSClusterAdminPolicy). With a private
    endpoint they also need a network path into the VPC (VPN, peering) or the admin host."""
    support_type: SupportType = "STANDARD"
    """EKS upgrade policy. STANDARD: at the end of standard support EKS upgrades the control plane to the next
    version instead of moving it into paid extended support. EXTENDED: stay (billed per cluster-hour)."""
    log_retention_days: int = 365
    """Days CloudWatch Logs keeps the control-plane log group (one of the CloudWatch retention values)."""

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            allowed = ", ".join(str(v) for v in LOG_RETENTION_DAYS)
            raise ValueError(f"{value} is not a CloudWatch Logs retention period; use one of {allowed}")
        return value

    @model_validator(mode="after")
    def _reachable(self) -> ClusterConfig:
        if self.endpoint_access == "private" and not self.admin_host and not self.admin_principal_arns:
            raise ValueError(
                "a private cluster endpoint with admin_host: false and no admin_principal_arns leaves nobody able to "
                "reach the cluster; keep admin_host: true, or list admin_principal_arns that have a path into the VPC"
            )
        return self

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not _ARN.match(arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN; use arn:aws:iam::123456789012:role/name")
        if len(set(value)) != len(value):
            raise ValueError("admin_principal_arns lists an ARN more than once; list each once")
        return value


class SystemNodeGroupConfig(StrictModel):
    """CPU nodes for cluster services (CoreDNS, device-plugin controllers, the trainer operator)."""

    instance_type: str = "m7i.xlarge"
    desired_size: int = Field(default=2, ge=1, le=20)
    min_size: int = Field(default=2, ge=1, le=20)
    max_size: int = Field(default=4, ge=1, le=20)
    disk_size_gib: int = Field(default=50, ge=20, le=1000)

    @field_validator("instance_type")
    @classmethod
    def _known(cls, value: str) -> str:
        name = _catalog_instance(value)
        if get_instance(name).accelerator is not None:
            raise ValueError(
                f"{name} is an accelerated instance; system nodes run cluster services on a standard AMI: pick a CPU "
                "type such as m7i.xlarge and put accelerators in node_groups"
            )
        return name

    @property
    def instance(self) -> InstanceType:
        return get_instance(self.instance_type)

    @model_validator(mode="after")
    def _sizes(self) -> SystemNodeGroupConfig:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"sizes must satisfy min_size <= desired_size <= max_size, got {self.min_size} <= "
                f"{self.desired_size} <= {self.max_size}; adjust them"
            )
        return self


class CapacityConfig(StrictModel):
    """Where the node group's instances come from."""

    type: CapacityKind = "on_demand"
    reservation_id: str | None = None
    """`cr-...` ID of the ODCR or Capacity Block; required for those two kinds, not allowed otherwise."""
    placement_group_name: str | None = None
    """capacity_reservation only: the cluster placement group the ODCR was created in (EC2 User Guide, "Capacity
    Reservations for cluster placement groups"); the launch template places nodes in it. Capacity Blocks take
    none: EC2 co-locates a block's instances itself."""

    @model_validator(mode="after")
    def _reservation(self) -> CapacityConfig:
        if self.type in RESERVATION_KINDS:
            if self.reservation_id is None:
                raise ValueError(f"capacity type {self.type} needs reservation_id (cr-...); add it")
            if not _RESERVATION_ID.match(self.reservation_id):
                raise ValueError(
                    f"reservation_id {self.reservation_id!r} is not a capacity reservation ID; "
                    "use the cr-0123456789abcdef0 form"
                )
        elif self.reservation_id is not None:
            raise ValueError(
                f"reservation_id is only used with capacity_reservation or capacity_block, not {self.type}; remove it"
            )
        if self.placement_group_name is not None:
            if self.type != "capacity_reservation":
                raise ValueError(
                    f"placement_group_name is only used with capacity_reservation (the group the ODCR was created "
                    f"in), not {self.type}; remove it"
                )
            if not _PLACEMENT_GROUP_NAME.match(self.placement_group_name):
                raise ValueError(
                    f"placement_group_name {self.placement_group_name!r} is not a placement group name; use up to "
                    "255 letters, digits, '.', '_' or '-'"
                )
        return self

    @property
    def is_reservation(self) -> bool:
        return self.type in RESERVATION_KINDS


class NodeGroupConfig(StrictModel):
    """One accelerated (or CPU) EKS managed node group of one instance type, in one AZ."""

    name: str = Field(pattern=r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
    """Short name; used in construct IDs and labels (a rename replaces the node group)."""
    instance_type: str
    desired_size: int = Field(default=0, ge=0)
    """0 by default: no accelerated instance runs until the blueprint (or a scaler) asks for one."""
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=2, ge=1)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    efa: bool = True
    """Attach one EFA per network card (the catalog's layout) and a cluster placement group."""
    efa_on_every_card: bool = False
    """`efa` (with an IP) on every card instead of `efa-only` on cards 1..N-1 (the catalog's EFA layout)."""
    placement_group: bool | None = None
    """Cluster placement group; default: on for EFA groups without a reservation, never with one."""
    availability_zones: list[str] | None = Field(default=None, min_length=1)
    """AZ names or IDs (as the network lists them), one subnet each; default: the network's first zone.
    An EFA group takes exactly one: EFA traffic does not cross subnets or AZs (EC2 User Guide, EFA limitations)."""
    root_volume_gib: int = Field(default=200, ge=50, le=16384)

    @field_validator("name")
    @classmethod
    def _not_system(cls, value: str) -> str:
        if value == "system":
            raise ValueError(
                "'system' is the system node group's label value (mlstack.io/node-group); a job selecting this group "
                "would also land on the system nodes: pick another name"
            )
        return value

    @field_validator("instance_type")
    @classmethod
    def _known(cls, value: str) -> str:
        return _catalog_instance(value)

    @model_validator(mode="after")
    def _rules(self) -> NodeGroupConfig:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"node group {self.name!r}: sizes must satisfy min_size <= desired_size <= max_size, got "
                f"{self.min_size} <= {self.desired_size} <= {self.max_size}; adjust them"
            )
        it = self.instance
        if self.efa and not it.efa_supported:
            raise ValueError(
                f"node group {self.name!r}: {it.name} does not support EFA; set efa: false or pick an "
                "EFA-capable type (e.g. p5.48xlarge, p4d.24xlarge, trn1.32xlarge, g6e.48xlarge)"
            )
        if self.efa and self.availability_zones is not None and len(self.availability_zones) > 1:
            raise ValueError(
                f"node group {self.name!r}: EFA needs one subnet in one AZ, got {len(self.availability_zones)} "
                f"({', '.join(self.availability_zones)}); EFA traffic does not cross subnets or AZs: list one zone"
            )
        if self.efa_on_every_card and not self.efa:
            raise ValueError(f"node group {self.name!r}: efa_on_every_card needs efa: true; remove it or enable efa")
        if self.placement_group and self.capacity.is_reservation:
            hint = (
                "; to use the cluster placement group the ODCR was created in, name it in capacity.placement_group_name"
                if self.capacity.type == "capacity_reservation"
                else ""
            )
            raise ValueError(
                f"node group {self.name!r}: a new placement group cannot be combined with a {self.capacity.type} "
                f"(its instances would not match the reservation); remove placement_group{hint}"
            )
        if self.capacity.placement_group_name is not None and not self.efa:
            raise ValueError(
                f"node group {self.name!r}: capacity.placement_group_name is for EFA groups; enable efa or remove it"
            )
        if self.placement_group and not self.efa:
            raise ValueError(
                f"node group {self.name!r}: placement_group is for EFA groups; enable efa or remove placement_group"
            )
        if self.capacity.type == "spot" and self.efa and self.max_size > 1:
            raise ValueError(
                f"node group {self.name!r}: Spot capacity with multi-node EFA (max_size {self.max_size}): one "
                "interruption stops the whole job; use on_demand, capacity_reservation or capacity_block, or "
                "max_size: 1"
            )
        return self

    @property
    def instance(self) -> InstanceType:
        return get_instance(self.instance_type)

    @property
    def uses_placement_group(self) -> bool:
        if self.placement_group is not None:
            return self.placement_group
        return self.efa and not self.capacity.is_reservation


class DataRepositoryConfig(StrictModel):
    """S3 prefix linked to the file system by a data repository association (lazy import + export)."""

    bucket: str
    """Existing bucket name (not created here)."""
    prefix: str = ""
    """Key prefix inside the bucket, e.g. `datasets/` (empty: the whole bucket)."""
    file_system_path: str = "/data"
    """Where the prefix appears inside the file system."""
    import_events: list[RepositoryEvent] = Field(default_factory=lambda: list(ALL_REPOSITORY_EVENTS))
    """S3 changes imported into the file system (AutoImportPolicy)."""
    export_events: list[RepositoryEvent] = Field(default_factory=lambda: list(ALL_REPOSITORY_EVENTS))
    """File-system changes exported to S3 (AutoExportPolicy)."""

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        if not _BUCKET.match(value) or ".." in value:
            raise ValueError(f"{value!r} is not an S3 bucket name; use 3-63 lower-case letters, digits, dots, hyphens")
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value.startswith("/"):
            raise ValueError(f"prefix {value!r} must not start with '/'; write e.g. datasets/")
        return value

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not re.match(r"^/[A-Za-z0-9_./-]*$", value) or value == "/":
            raise ValueError(f"file_system_path {value!r} must be an absolute path below /, e.g. /data")
        return value

    @property
    def s3_path(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


class FsxConfig(StrictModel):
    """FSx for Lustre shared by the training nodes (FSx for Lustre User Guide)."""

    deployment_type: FsxDeployment = "PERSISTENT_2"
    storage_capacity_gib: int = 1200
    """1200, 2400, then multiples of 2400 GiB (PERSISTENT_2 / SCRATCH_2 SSD)."""
    per_unit_storage_throughput: int | None = 250
    """MB/s per TiB for PERSISTENT_2: 125, 250, 500 or 1000 (default 250). Not used by SCRATCH_2: leave it out."""
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    availability_zone: str | None = None
    """Default: the AZ of the EFA node group (it must be the same AZ)."""
    automatic_backup_retention_days: int = Field(default=0, ge=0, le=90)
    data_repository: DataRepositoryConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _scratch_has_no_throughput(cls, data: Any) -> Any:
        # The 250 MB/s/TiB default is for PERSISTENT_2; SCRATCH_2 without the key means "none", not an error.
        if isinstance(data, dict) and data.get("deployment_type") == "SCRATCH_2":
            data = {"per_unit_storage_throughput": None, **data}
        return data

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, value: int) -> int:
        if value not in (1200, 2400) and (value <= 0 or value % 2400 != 0):
            raise ValueError(f"FSx for Lustre SSD capacity must be 1200, 2400 or a multiple of 2400 GiB, got {value}")
        return value

    @model_validator(mode="after")
    def _throughput(self) -> FsxConfig:
        if self.deployment_type == "PERSISTENT_2":
            if self.per_unit_storage_throughput not in PERSISTENT_2_THROUGHPUT:
                allowed = ", ".join(str(v) for v in PERSISTENT_2_THROUGHPUT)
                raise ValueError(
                    f"per_unit_storage_throughput for PERSISTENT_2 must be one of {allowed} MB/s/TiB, "
                    f"got {self.per_unit_storage_throughput}"
                )
        elif self.per_unit_storage_throughput is not None:
            raise ValueError(f"per_unit_storage_throughput is not used by {self.deployment_type}; remove it")
        if self.deployment_type == "SCRATCH_2" and self.automatic_backup_retention_days:
            raise ValueError("SCRATCH_2 file systems have no backups; set automatic_backup_retention_days: 0")
        if self.data_repository is not None and self.automatic_backup_retention_days:
            raise ValueError(
                "FSx for Lustre does not back up file systems linked to an S3 data repository (FSx Lustre User Guide, "
                "Using data repositories); set automatic_backup_retention_days: 0 (S3 holds the durable copy) or "
                "remove data_repository"
            )
        return self

    @property
    def capacity_tib(self) -> float:
        """Capacity in TiB as FSx counts it for throughput: 1000 GiB per TiB ([BOTO] PerUnitStorageThroughput: "For a
        2.4-TiB file system [2400 GiB], provisioning 50 MB/s/TiB ... yields 120 MB/s")."""
        return self.storage_capacity_gib / 1000

    @property
    def throughput_mbps(self) -> float:
        """Aggregate baseline disk throughput, MB/s (capacity in TiB x per-unit throughput; SCRATCH_2: 200/TiB)."""
        per_tib = self.per_unit_storage_throughput or 200
        return self.capacity_tib * per_tib


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
    """The example multi-node job that `mlstack plan` renders (runtime/k8s/)."""

    name: str = Field(default="train", pattern=r"^[a-z][a-z0-9-]{0,40}[a-z0-9]$")
    image: str | None = None
    """Training image with EFA, libfabric and aws-ofi-nccl (or the Neuron SDK); unset: a placeholder is printed."""
    script: str = "/opt/mlstack/runtime/workloads/train.py"
    """Entry point passed to torchrun; the default is the reference script baked into the image built from
    runtime/containers/train.Dockerfile (DDP/FSDP/DeepSpeed, checkpoints on FSx)."""
    node_group: str | None = None
    """Node group the job runs on; default: the first EFA group."""
    nodes: int | None = Field(default=None, ge=1)
    """Nodes per job; default: the node group's max_size."""
    namespace: str = Field(default="training", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


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

    @model_validator(mode="after")
    def _engine(self) -> TrainingConfig:
        problems = engine_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self

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
        return problems + engine_zone_problems(self, zones)
