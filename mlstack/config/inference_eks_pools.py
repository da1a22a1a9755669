"""Node autoscaling of `inference: {engine: eks}`: Karpenter pools for the endpoints' GPU nodes
(`inference.capacity_manager: karpenter`, settings in `inference.karpenter`), and the working hours that wake an
endpoint scaled to zero (`autoscaling.active_hours`).

Rules checked here (`scaling_problem`), each a one-line error with the fix:
- with Karpenter, every endpoint gives `max_replicas`: the pool's GPU limit (its cost cap) is derived from it;
- `min_replicas: 0` needs Karpenter (a fixed node group keeps its GPU nodes with no server on them) and
  `active_hours`: KEDA reads the queue depth (`vllm:num_requests_waiting`) from the running servers, so with none
  running it never sees a request; the schedule is what starts the first server;
- `active_hours` only with `min_replicas: 0`, start and end differ, its replicas within max_replicas;
- no endpoint is named `system` (the system node group's label value, which the servers' node selector would match).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlstack.config.base import StrictModel

__all__ = ["ActiveHoursConfig", "ServingKarpenterConfig", "scaling_problem"]

_CRON = r"^\S+ \S+ \S+ \S+ \S+$"
CapacityType = Literal["on-demand", "spot"]


class ServingKarpenterConfig(StrictModel):
    """Karpenter pools of the serving endpoints (one NodePool + EC2NodeClass per endpoint). Servers are stateless:
    a node may be consolidated (emptied or underutilized) and replaced on drift (a new AMI), one node at a time, each
    server draining its requests first (its preStop hook, PodDisruptionBudget and grace period)."""

    capacity_types: list[CapacityType] = Field(default_factory=lambda: list[CapacityType](["on-demand"]), min_length=1)
    """On-demand by default. With `spot` too, Karpenter prefers Spot where offered and a Spot interruption (two
    minutes' notice, drained through the interruption queue) may cut requests that run longer than that."""
    consolidate_after_minutes: int = Field(default=10, ge=1, le=1440)
    """How long a node stays empty or underutilized before Karpenter removes or replaces it (`consolidateAfter`)."""
    termination_grace_period_minutes: int = Field(default=60, ge=15, le=1440)
    """NodePool `terminationGracePeriod`: the longest a draining node waits for its servers (PodDisruptionBudget
    included) before Karpenter terminates it; at least 15 minutes, the time a replacement server needs to start."""


class ActiveHoursConfig(StrictModel):
    """When a scale-to-zero endpoint runs (KEDA `cron` trigger; KEDA docs, Scalers: Cron): `replicas` servers from
    `start` to `end`, zero outside once no request runs or waits for `cooldown` (KEDA's `cooldownPeriod`)."""

    timezone: str = Field(pattern=r"^(UTC|[A-Z][A-Za-z_]+(/[A-Za-z0-9_+-]+){1,2})$")
    """IANA time zone, e.g. Europe/Berlin or UTC."""
    start: str = Field(pattern=_CRON)
    """Linux cron (minute hour day-of-month month day-of-week), e.g. `30 7 * * 1-5`: start early by the cold start
    (`mlstack plan` gives it: node launch, image pull, weights load)."""
    end: str = Field(pattern=_CRON)
    """e.g. `0 19 * * 1-5`."""
    replicas: int = Field(default=1, ge=1, le=100)

    @model_validator(mode="after")
    def _window(self) -> ActiveHoursConfig:
        if self.start == self.end:
            raise ValueError(
                f"active_hours start and end are both {self.start!r}: KEDA's cron trigger needs a window; "
                "give end a later time"
            )
        return self


def scaling_problem(
    endpoint: str,
    *,
    min_replicas: int,
    max_replicas: int | None,
    active_hours: ActiveHoursConfig | None,
    karpenter: bool,
) -> str | None:
    """The first rule of the module docstring that the endpoint's autoscaling breaks, as one line; None if none."""
    if endpoint == "system":
        return (
            "endpoint name 'system' is the system node group's label value (the servers would select those nodes); "
            "name the endpoint otherwise"
        )
    if karpenter and max_replicas is None:
        return (
            f"endpoint {endpoint!r}: capacity_manager karpenter needs autoscaling.max_replicas (the pool's GPU limit, "
            "its cost cap, is what max_replicas servers need); set it"
        )
    if min_replicas == 0 and not karpenter:
        return (
            f"endpoint {endpoint!r}: min_replicas 0 needs inference.capacity_manager: karpenter (a fixed node group "
            "keeps its GPU nodes running with no server on them); set it, or min_replicas >= 1"
        )
    if min_replicas == 0 and active_hours is None:
        return (
            f"endpoint {endpoint!r}: min_replicas 0 needs autoscaling.active_hours (timezone, start, end): KEDA reads "
            "vllm:num_requests_waiting from the running servers, so with none running no request can wake one; "
            "give the hours, or min_replicas >= 1"
        )
    if active_hours is not None and min_replicas > 0:
        return (
            f"endpoint {endpoint!r}: active_hours wakes an endpoint from zero, but min_replicas {min_replicas} keeps "
            "servers running at all hours; remove active_hours or set min_replicas 0"
        )
    if active_hours is not None and max_replicas is not None and active_hours.replicas > max_replicas:
        return (
            f"endpoint {endpoint!r}: active_hours.replicas {active_hours.replicas} exceeds max_replicas "
            f"{max_replicas}; lower it or raise max_replicas"
        )
    return None
