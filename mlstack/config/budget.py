"""`budget:`: a monthly AWS Budgets cost budget on the blueprint's cost-allocation tag, notifying the training
stack's alarm topic at chosen thresholds."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from mlstack.config.base import StrictModel

BUDGET_TAG = "mlstack:blueprint"
"""The tag every stack of a blueprint puts on every resource it creates (`MlStack`), valued with the blueprint's
name: the budget filters on it, once it is activated as a cost-allocation tag (Billing console, or
`aws ce update-cost-allocation-tags-status`); `mlstack precheck` checks that it is."""


class BudgetConfig(StrictModel):
    """A monthly cost budget of everything the blueprint's stacks create."""

    monthly_usd: float = Field(gt=0, le=10_000_000)
    """The budget limit in USD per calendar month."""
    thresholds_percent: list[int] = Field(default_factory=lambda: [50, 80, 100], min_length=1, max_length=5)
    """Notify the alarm topic when actual cost passes each of these percentages of `monthly_usd` (AWS Budgets
    allows up to five notifications per budget, with the forecast one below counted)."""
    forecast_percent: int | None = Field(default=100, ge=1, le=1000)
    """Also notify when the month's forecast cost passes this percentage; null for none."""
    scale_to_zero_at_percent: int | None = Field(default=None, ge=1, le=1000)
    """When actual cost passes this percentage, a function scales the accelerated capacity to zero (engine eks:
    every accelerated node group; batch: the queue's jobs terminated, the compute environment disabled; HyperPod
    engines: every accelerated instance group to 0 instances) and tells the alarm topic; null (default) for none.
    With `capacity_manager: karpenter` (eks, and HyperPod's managed Karpenter on hyperpod-eks) it also sets each
    accelerated NodePool's limits to 0 and deletes its NodeClaims through the Kubernetes API (the function then runs
    in the cluster's VPC); resume with the `kubectl patch nodepool` command the plan and the message name.
    Endpoints are not scaled (a real-time endpoint keeps at least one instance): the plan says so."""
    expected_hours: float = Field(default=730, gt=0, le=744)
    """Hours a month the blueprint's accelerated nodes run at their maximum: `mlstack plan` warns when maximum
    $/h x these hours is above `monthly_usd`."""

    @field_validator("thresholds_percent")
    @classmethod
    def _thresholds(cls, value: list[int]) -> list[int]:
        bad = [v for v in value if not 1 <= v <= 1000]
        if bad:
            raise ValueError(
                f"thresholds_percent {bad} must each be 1..1000 (percent of monthly_usd), e.g. [50, 80, 100]"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"thresholds_percent {value} repeats a value; list each percentage once")
        return sorted(value)

    @model_validator(mode="after")
    def _at_most_five(self) -> BudgetConfig:
        if self.scale_to_zero_at_percent in self.thresholds_percent:
            raise ValueError(
                f"scale_to_zero_at_percent {self.scale_to_zero_at_percent} is also in thresholds_percent: AWS Budgets "
                "takes one notification per threshold; drop it from thresholds_percent (the function tells the "
                "alarm topic when it scales)"
            )
        if self.notification_count > 5:
            raise ValueError(
                f"budget has {self.notification_count} notifications (thresholds_percent, forecast_percent, "
                "scale_to_zero_at_percent); AWS Budgets allows 5 per budget: drop a threshold or set forecast_percent: "
                "null"
            )
        return self

    @property
    def notification_count(self) -> int:
        return (
            len(self.thresholds_percent)
            + (self.forecast_percent is not None)
            + (self.scale_to_zero_at_percent is not None)
        )
