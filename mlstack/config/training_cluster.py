"""The compute of the `training:` section: the EKS control plane, the system node group, the accelerated node
groups and where their capacity comes from.

Rules checked here (EC2 User Guide: EFA, placement groups, Capacity Reservations): EFA only on an instance with
EFA and in one AZ, no new placement group with a reservation, Spot not with multi-node EFA, node counts, a
private cluster someone can reach, instance types from the catalog.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import InstanceType, get_instance
from mlstack.common import LOG_RETENTION_DAYS
from mlstack.config.base import StrictModel, pascal_id
from mlstack.errors import CatalogError

KubernetesVersion = Literal["1.34", "1.35", "1.36"]
"""EKS versions this project builds for: AL2023 accelerated AMIs exist (no AL2 AMIs from 1.33), the default VPC CNI
add-on supports EFA-only interfaces (>= 1.18.5), and each has a kubectl Lambda layer of its own minor version
(`aws-cdk.lambda-layer-kubectl-v34` .. `-v36`, one PyPI package per minor; `TrainingCluster` picks the cluster's)."""

HYPERPOD_KUBERNETES_VERSIONS: tuple[str, ...] = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
"""Kubernetes versions SageMaker HyperPod supports for an EKS orchestrator, as of 2026-12-01 ("Getting started with
Amazon EKS support in SageMaker HyperPod", Requirements, "Kubernetes version support":
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html). Engine hyperpod-eks
takes only a version both this list and `KubernetesVersion` hold; re-read the page when adding a version."""

SupportType = Literal["STANDARD", "EXTENDED"]

CapacityKind = Literal["on_demand", "spot", "capacity_reservation", "capacity_block"]
"""How the node group gets instances: On-Demand, Spot, a targeted On-Demand Capacity Reservation (ODCR), or an
EC2 Capacity Block for ML (both reservation kinds are `cr-...` IDs)."""

RESERVATION_KINDS: frozenset[str] = frozenset({"capacity_reservation", "capacity_block"})

PLACEHOLDER_RESERVATION_ID = "cr-0123456789abcdef0"
"""The example ID a shipped blueprint (eks-p4d-training) carries: valid in form, so a group with nodes must not keep
it (the launch template would target a reservation that is not the user's, and the node group never gets nodes)."""

_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
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
                    f"reservation_id {self.reservation_id!r} is not a capacity reservation ID; use the cr-... ID "
                    "`aws ec2 describe-capacity-reservations` lists (cr- and 8 to 17 hex digits)"
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
        if self.capacity.reservation_id == PLACEHOLDER_RESERVATION_ID and max(self.desired_size, self.min_size) > 0:
            raise ValueError(
                f"node group {self.name!r}: capacity.reservation_id {PLACEHOLDER_RESERVATION_ID} is the blueprint's "
                "placeholder; put your own reservation's cr-... ID there (`aws ec2 describe-capacity-reservations`), "
                "or keep desired_size and min_size at 0"
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
