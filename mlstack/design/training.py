"""Training decisions the stacks and the plan both read: the admin host's type, the cluster's name, whether the
blueprint's model fits its node groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlstack.catalog.fit import DEFAULT_SEQ_LEN, training_fit
from mlstack.catalog.memory import GIB
from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.config.training_cluster import CapacityKind

__all__ = [
    "ADMIN_HOST_TYPE",
    "BATCH_IMAGE_TYPE",
    "NodeGroupDesign",
    "cluster_name",
    "memory_warnings",
    "node_group_designs",
]

BATCH_IMAGE_TYPE: Literal["ECS_AL2023_NVIDIA"] = "ECS_AL2023_NVIDIA"
"""The AWS Batch compute environment's ECS AMI: the Amazon Linux 2023 GPU AMI (engine batch takes GPU node
groups only, `training_rules.py`; Amazon Linux 2 AMIs reach end of support)."""

ADMIN_HOST_TYPE = "m7i.large"
"""Instance type of the cluster admin host (kubectl only)."""


def cluster_name(config: BlueprintConfig) -> str:
    """The EKS cluster name: fixed, so the control-plane log group (named after it) can exist before the cluster."""
    return f"{config.name}-cluster"


def memory_warnings(training: TrainingConfig) -> list[str]:
    """A warning per node group the blueprint's model does not fit, by `mlstack.catalog.fit.training_fit`: the
    estimate and rule `mlstack advise train` applies, for the data-parallel (FSDP / ZeRO) job the plan renders."""
    if training.model is None:
        return []
    model = training.model
    warnings: list[str] = []
    for group in training.node_groups:
        it = group.instance
        if it.accelerator is None:
            continue
        # The job shards the model over its own nodes (job.nodes), other groups over all they may run (max_size).
        nodes = group.max_size
        if group.name == training.job_group.name and training.job.nodes is not None:
            nodes = training.job.nodes
        devices = it.accelerator.count * max(1, nodes)
        fit = training_fit(
            model.params,
            devices,
            device_memory_gib=it.accelerator.memory_gib,
            precision=model.precision,
            zero_stage=model.zero_stage,
        )
        if not fit.fits:
            memory = fit.memory
            warnings.append(
                f"node group {group.name!r}: a {model.params / 1e9:g}B-parameter model ({model.precision}, ZeRO "
                f"stage {model.zero_stage}) needs {fit.need_gib:,.1f} GiB per accelerator across {devices} devices "
                f"(model states {memory.states.total_bytes / GIB:,.1f}, activations at sequence length "
                f"{DEFAULT_SEQ_LEN} {memory.activations_bytes / GIB:,.1f}, gathered weights "
                f"{memory.gather_bytes / GIB:,.1f}), more than the {fit.usable_gib:,.1f} GiB usable "
                f"({1 - fit.headroom:.0%}) of the {fit.device_memory_gib:g} GiB of a {it.accelerator.model}; use "
                "more nodes, a higher ZeRO stage, or a larger instance (`mlstack advise train` also tries tensor "
                "and pipeline parallelism)"
            )
    return warnings


@dataclass(frozen=True)
class NodeGroupDesign:
    """One accelerated node group as the blueprint implies it: what `TrainingCluster.add_accelerated_node_group`
    takes, every decision made (EFA, placement group, zones) so the construct's own defaults never apply."""

    name: str
    instance_type: str
    zones: tuple[str, ...]
    efa: bool
    placement_group: bool
    """A cluster placement group: for EFA groups unless a reservation fixes placement (or the blueprint says)."""
    efa_on_every_card: bool
    capacity_type: CapacityKind
    reservation_id: str | None
    placement_group_name: str | None
    desired_size: int
    min_size: int
    max_size: int
    root_volume_gib: int


def node_group_designs(config: BlueprintConfig) -> list[NodeGroupDesign]:
    """The accelerated node groups of the EKS engine, in blueprint order."""
    training = config.training
    assert training is not None
    return [
        NodeGroupDesign(
            name=group.name,
            instance_type=group.instance_type,
            zones=tuple(training.zones_of(group, config.zones)),
            efa=group.efa,
            placement_group=group.uses_placement_group,
            efa_on_every_card=group.efa_on_every_card,
            capacity_type=group.capacity.type,
            reservation_id=group.capacity.reservation_id,
            placement_group_name=group.capacity.placement_group_name,
            desired_size=group.desired_size,
            min_size=group.min_size,
            max_size=group.max_size,
            root_volume_gib=group.root_volume_gib,
        )
        for group in training.node_groups
    ]
