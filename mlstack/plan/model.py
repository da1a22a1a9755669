"""The plan's data model: what a blueprint creates (`Resource`), what it costs (`Cost`), which quotas it needs
(`Quota`), gathered in a `Plan`. Layer modules fill a `Plan`; `mlstack.plan.render` prints it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

HOURS_PER_MONTH = 730
"""AWS pricing pages' convention for a month of on-demand use."""


@dataclass(frozen=True)
class Resource:
    stack: str
    kind: str
    detail: str
    count: int = 1


@dataclass(frozen=True)
class Cost:
    item: str
    quantity: float
    unit_per_hour: float | None
    """USD per unit-hour; None when no price is known (the plan says so instead of guessing)."""
    price_date: str | None
    source: str

    @property
    def per_hour(self) -> float | None:
        return None if self.unit_per_hour is None else self.unit_per_hour * self.quantity


@dataclass(frozen=True)
class Quota:
    service: str
    name: str
    code: str
    needed: float
    unit: str = ""


@dataclass
class Plan:
    blueprint: str
    description: str
    region: str
    removal: str
    stacks: list[str] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    costs: list[Cost] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    """Layer-specific facts (nodes, accelerators, EFA, storage, manifests) for the text and JSON views."""

    @property
    def per_hour(self) -> float:
        """Sum of the known hourly costs (see `unpriced` for what is missing)."""
        return sum(c.per_hour for c in self.costs if c.per_hour is not None)

    @property
    def per_month(self) -> float:
        return self.per_hour * HOURS_PER_MONTH

    @property
    def unpriced(self) -> list[str]:
        return [c.item for c in self.costs if c.unit_per_hour is None]

    @property
    def unpriced_reasons(self) -> dict[str, str]:
        """Each unpriced item and why it has no price (its `source` line)."""
        return {c.item: c.source for c in self.costs if c.unit_per_hour is None}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["costs"] = [{**asdict(c), "per_hour": c.per_hour} for c in self.costs]
        data["per_hour"] = round(self.per_hour, 4)
        data["per_month"] = round(self.per_month, 2)
        data["hours_per_month"] = HOURS_PER_MONTH
        data["unpriced"] = self.unpriced
        data["unpriced_reasons"] = self.unpriced_reasons
        return data
