"""Cost guardrails a blueprint implies (no CDK import): its budget's notifications, and the Capacity Block
reservations whose expiry warning the training stack watches."""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.config import BlueprintConfig
from mlstack.config.budget import BUDGET_TAG
from mlstack.config.training import TrainingConfig


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
