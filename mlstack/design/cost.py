"""Cost guardrails a blueprint implies (no CDK import): its budget's notifications, the Karpenter NodePools its
scale-to-zero action stops, and the Capacity Block reservations whose expiry warning the training stack watches."""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.config import BlueprintConfig
from mlstack.config.budget import BUDGET_TAG
from mlstack.config.training import TrainingConfig
from mlstack.design.hyperpod_governance import autoscaling
from mlstack.design.karpenter import pools
from mlstack.k8s.hyperpod_karpenter import node_class_name
from mlstack.k8s.kube import accelerator_resource


@dataclass(frozen=True)
class BudgetDesign:
    monthly_usd: float
    tag_key: str
    tag_value: str
    thresholds_percent: tuple[int, ...]
    forecast_percent: int | None
    expected_hours: float
    scale_to_zero_at_percent: int | None = None


def budget_design(config: BlueprintConfig) -> BudgetDesign | None:
    """The blueprint's budget on its `mlstack:blueprint` tag, or None."""
    budget = config.budget
    if budget is None:
        return None
    return BudgetDesign(
        monthly_usd=budget.monthly_usd,
        tag_key=BUDGET_TAG,
        tag_value=config.name,
        thresholds_percent=tuple(budget.thresholds_percent),
        forecast_percent=budget.forecast_percent,
        expected_hours=budget.expected_hours,
        scale_to_zero_at_percent=budget.scale_to_zero_at_percent,
    )


@dataclass(frozen=True)
class PoolLimits:
    """An accelerated Karpenter NodePool the budget's action stops, with the `spec.limits` its manifest sets."""

    name: str
    limits: tuple[tuple[str, str], ...]

    @property
    def resume_command(self) -> str:
        """The kubectl command that gives the pool its manifest's limits back (a merge patch of `spec.limits`)."""
        limits = ",".join(f'"{key}":"{value}"' for key, value in self.limits)
        return f'kubectl patch nodepool {self.name} --type merge -p \'{{"spec":{{"limits":{{{limits}}}}}}}\''


def scale_to_zero_pools(config: BlueprintConfig) -> tuple[PoolLimits, ...]:
    """The accelerated NodePools of a blueprint with Karpenter (engine eks, or hyperpod-eks with HyperPod's managed
    Karpenter), each with the limits its manifest carries; () without Karpenter or without a training section."""
    training = config.training
    if training is None or training.capacity_manager != "karpenter":
        return ()
    if training.engine == "eks":
        return tuple(
            PoolLimits(p.name, ((p.accelerator_resource, str(p.limit)),))
            for p in pools(training, config.zones)
            if p.accelerator_resource is not None
        )
    design = autoscaling(training) if training.engine == "hyperpod-eks" else None
    if design is None:
        return ()
    groups = {g.name: g for g in training.node_groups}
    found = []
    for name, _ml_type, max_nodes in design.max_nodes:
        it = groups[name].instance
        resource = accelerator_resource(it)
        if resource is not None and it.accelerator is not None:
            found.append(
                PoolLimits(node_class_name(design, name), ((resource, str(max_nodes * it.accelerator.count)),))
            )
    return tuple(found)


def capacity_block_reservations(training: TrainingConfig) -> tuple[str, ...]:
    """The Capacity Block reservation IDs of the node groups (eks and batch engines: HyperPod reserves capacity
    through training plans instead), sorted and each once."""
    if training.engine not in ("eks", "batch"):
        return ()
    ids = {
        group.capacity.reservation_id
        for group in training.node_groups
        if group.capacity.type == "capacity_block" and group.capacity.reservation_id is not None
    }
    return tuple(sorted(ids))
