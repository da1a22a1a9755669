"""Scale a training option out to a wall-clock target: more data-parallel replicas, the same TP x PP per replica.

The advisor first finds the smallest node count at which a layout TP x PP x DP fits. With a target (`--days`), the
node count grows in steps that keep whole replicas (a step of lcm(TP x PP, devices per node) / devices per node
nodes) until the estimated time meets the target, or a limit is reached:
- `--max-nodes` (the capacity you can get), and `--budget-per-hour` when given (nodes x price per node);
- the global batch: DP can not exceed the sequences per step (global batch tokens / (sequence length x micro-batch)),
  since every replica needs at least one micro-batch.

The time at each node count comes from the caller (`hours_at`), which adds the EFA time per step that does not hide
behind compute: the DP gradient reduce-scatter / parameter all-gather stays the same size per device while the
compute per device shrinks, so the time falls less than linearly and stops falling once DP traffic dominates.
Time is non-increasing in the node count under that model, so the smallest node count that meets the target is
found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mlstack.catalog.advice import MAX_NODES

__all__ = ["ScaleOut", "days_text", "node_step", "scale_out"]


def node_step(model_parallel: int, devices_per_node: int) -> int:
    """Fewest nodes to add so that the device count stays a whole number of TP x PP replicas."""
    return math.lcm(model_parallel, devices_per_node) // devices_per_node


@dataclass(frozen=True)
class ScaleOut:
    nodes: int
    hours: float
    met: bool
    note: str | None
    """One line when the target is not met: the limit that stopped the scale-out and what would meet it."""


def days_text(hours: float) -> str:
    days = hours / 24
    return f"{days:.1f} d" if days < 10 else f"{days:,.0f} d"


def _smallest_meeting(first: int, last: int, step: int, ok: Callable[[int], bool]) -> int | None:
    """Smallest multiple of `step` in [first, last] with ok(n), assuming ok is monotone (False..., True...)."""
    lo, hi = first // step, last // step
    if hi < lo or not ok(hi * step):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid * step):
            hi = mid
        else:
            lo = mid + 1
    return lo * step


def scale_out(
    *,
    min_nodes: int,
    step: int,
    target_hours: float,
    hours_at: Callable[[int], float],
    max_nodes: int,
    batch_nodes: int,
    budget_nodes: int | None,
    multi_node: bool,
) -> ScaleOut:
    """The smallest node count >= `min_nodes` (a multiple of `step`) whose estimated time meets `target_hours`.

    `batch_nodes` is the most nodes the global batch allows (one micro-batch per replica), `budget_nodes` the most
    the budget per hour pays for (None: no budget). When the target is not met within the limits, the option keeps
    the largest node count allowed and `note` says why, and how many nodes would meet it if a limit were raised.
    """
    days = target_hours / 24

    def ok(n: int) -> bool:
        return hours_at(n) <= target_hours

    base = hours_at(min_nodes)
    if base <= target_hours:
        return ScaleOut(min_nodes, base, True, None)
    if not multi_node:
        return ScaleOut(min_nodes, base, False, f"target {days:g} d not met: no EFA, one node takes {days_text(base)}")
    limits = [(max_nodes, f"--max-nodes {max_nodes}"), (batch_nodes, "the global batch (one micro-batch per replica)")]
    if budget_nodes is not None:
        limits.append((budget_nodes, "--budget-per-hour"))
    cap, why = min(limits, key=lambda lim: lim[0])
    top = max(min_nodes, cap // step * step)
    found = _smallest_meeting(min_nodes, top, step, ok)
    if found is not None:
        return ScaleOut(found, hours_at(found), True, None)
    limit = min(MAX_NODES, batch_nodes) // step * step
    reach = _smallest_meeting(top + step, limit, step, ok)
    if reach is not None:
        more = f"about {reach:,} nodes would meet it"
    elif limit > top:
        most = "the most the global batch allows" if batch_nodes <= MAX_NODES else f"the limit of {MAX_NODES:,}"
        more = f"even {limit:,} nodes ({most}) take {days_text(hours_at(limit))}"
    elif batch_nodes <= top:
        more = "a larger --global-batch-tokens allows more replicas"
    else:
        more = f"{MAX_NODES:,} nodes is the advisor's limit"
    hours = hours_at(top)
    return ScaleOut(
        top, hours, False, f"target {days:g} d not met within {why}: {top:,} nodes take {days_text(hours)}; {more}"
    )
