"""What the advisor returns (`Option`, `Advice`) and the helpers both advisors share (checks, price, ranking)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from mlstack.catalog.instances import InstanceType, catalog
from mlstack.catalog.memory import GIB, MAX_PARAMS
from mlstack.catalog.parallel import LayoutEstimate
from mlstack.catalog.prices import DatedPrice, Service, price
from mlstack.catalog.serving_model import ServingEstimate
from mlstack.catalog.utilisation import UtilisationPick
from mlstack.errors import InputError

__all__ = ["CPU_OS_RESERVE_GIB", "MAX_NODES", "Advice", "Option", "Task", "node_counts"]

Task = Literal["train", "infer"]

CPU_OS_RESERVE_GIB = 4.0
"""Host RAM left to the OS and the serving process on CPU hosts."""
MAX_NODES = 10_000


@dataclass(frozen=True)
class Option:
    """One instance type x node count, chosen or cut, with the reason."""

    instance: InstanceType
    nodes: int
    chosen: bool
    reason: str
    used_bytes_per_device: float | None = None
    usable_bytes_per_device: float | None = None
    price_per_hour: float | None = None
    """For all nodes together; None when no dated price is known for the billing service."""
    est_hours: float | None = None
    est_cost: float | None = None
    demoted: bool = False
    """Ranked after the other chosen options (multi-node GPU training without GPUDirect RDMA)."""
    dated_price: DatedPrice | None = None
    layout: LayoutEstimate | None = None
    utilisation: UtilisationPick | None = None
    min_nodes: int | None = None
    """Training: the smallest node count that fits (`nodes` is larger when scaled out to meet a target)."""
    target_days: float | None = None
    target_met: bool | None = None
    """None when no target was given or the time is unknown."""
    target_note: str | None = None
    """One line when the target is not met: the limit that stopped the scale-out."""
    serving: ServingEstimate | None = None
    """Inference: the estimate of one replica (None for training, CPU hosts and accelerators without figures)."""
    replicas: int = 1
    """Inference: model replicas per node (devices per node / tensor-parallel degree)."""

    @property
    def output_tokens_per_s(self) -> float | None:
        """Inference: output tokens/s of the whole option (all replicas; a multi-node option is one replica)."""
        if self.serving is None:
            return None
        return self.serving.output_tokens_per_s * self.replicas

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        rate = self.output_tokens_per_s
        if rate is None or self.price_per_hour is None or rate <= 0:
            return None
        return self.price_per_hour / (rate * 3600.0) * 1e6

    @property
    def est_hours_range(self) -> tuple[float, float] | None:
        """(low, high) hours: the point estimate x/÷ the utilisation's uncertainty (None without an estimate).

        With `--mfu` given by the user the range is the same factor around their figure."""
        if self.est_hours is None:
            return None
        if self.utilisation is None:
            return self.est_hours, self.est_hours
        return self.utilisation.hours_range(self.est_hours)

    @property
    def devices(self) -> int:
        acc = self.instance.accelerator
        return self.nodes * (acc.count if acc else 1)

    @property
    def efa_gbps_per_node(self) -> float:
        return self.instance.efa_gbps

    def describe_accelerators(self) -> str:
        acc = self.instance.accelerator
        if acc is None:
            flags = ["AMX"] if self.instance.intel_amx else (["Graviton"] if self.instance.graviton else [])
            return f"CPU {self.instance.vcpus} vCPU {self.instance.memory_gib:g}GiB" + (
                f" ({flags[0]})" if flags else ""
            )
        return acc.describe()

    def to_json(self) -> dict[str, object]:
        p = self.dated_price
        return {
            "instance_type": self.instance.name,
            "sagemaker_name": self.instance.sagemaker_name,
            "nodes": self.nodes,
            "devices": self.devices,
            "chosen": self.chosen,
            "reason": self.reason,
            "accelerators": self.describe_accelerators(),
            "used_gib_per_device": None if self.used_bytes_per_device is None else self.used_bytes_per_device / GIB,
            "usable_gib_per_device": (
                None if self.usable_bytes_per_device is None else self.usable_bytes_per_device / GIB
            ),
            "efa_gbps_per_node": self.efa_gbps_per_node,
            "price_per_hour": self.price_per_hour,
            "price_source": p.source if p is not None and self.price_per_hour is not None else None,
            "price_service": p.service if p is not None else None,
            "price_date": p.date if p is not None else None,
            "price_read": p.read if p is not None else None,
            "est_hours": self.est_hours,
            "est_hours_low": None if self.est_hours_range is None else self.est_hours_range[0],
            "est_hours_high": None if self.est_hours_range is None else self.est_hours_range[1],
            "est_days": None if self.est_hours is None else self.est_hours / 24,
            "est_cost": self.est_cost,
            "min_nodes": self.min_nodes,
            "target_days": self.target_days,
            "target_met": self.target_met,
            "target_note": self.target_note,
            "layout": None if self.layout is None else self.layout.to_json(),
            "utilisation": None if self.utilisation is None else self.utilisation.to_json(),
            "tensor_parallel": None if self.serving is None else self.serving.tensor_parallel,
            "replicas_per_node": self.replicas if self.serving is not None else None,
            "ttft_ms": None if self.serving is None else self.serving.ttft_s * 1e3,
            "tpot_ms": None if self.serving is None else self.serving.tpot_s * 1e3,
            "output_tokens_per_s": self.output_tokens_per_s,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "serving": None if self.serving is None else self.serving.to_json(),
        }


@dataclass(frozen=True)
class Advice:
    task: Task
    inputs: dict[str, object]
    assumptions: tuple[str, ...]
    options: tuple[Option, ...] = field(default_factory=tuple)

    @property
    def chosen(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.chosen)

    @property
    def cut(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if not o.chosen)

    def prices_used(self) -> list[DatedPrice]:
        return [o.dated_price for o in self.chosen if o.dated_price is not None]

    def unpriced(self) -> list[str]:
        """Chosen instance types without a known price for the billing service."""
        return sorted({o.instance.name for o in self.chosen if o.price_per_hour is None})

    def to_json(self) -> dict[str, object]:
        used = self.prices_used()
        return {
            "task": self.task,
            "inputs": self.inputs,
            "assumptions": list(self.assumptions),
            "catalog_version": catalog().version,
            "oldest_price_date": min((p.date for p in used), default=None),
            "unpriced": self.unpriced(),
            "chosen": [o.to_json() for o in self.chosen],
            "cut": [o.to_json() for o in self.cut],
        }


def node_counts(max_nodes: int) -> list[int]:
    """Node counts tried: powers of two up to `max_nodes`, plus `max_nodes` itself."""
    counts = [2**i for i in range(int(math.log2(max_nodes)) + 1)]
    if counts[-1] != max_nodes:
        counts.append(max_nodes)
    return counts


def check_common(params: float, max_nodes: int, budget_per_hour: float | None, headroom: float) -> None:
    if not params > 0:
        raise InputError(f"--params must be positive, got {params:g}")
    if params > MAX_PARAMS:
        raise InputError(f"--params {params:g} is absurd (limit {MAX_PARAMS:g})")
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise InputError(f"--max-nodes must be at least 1, got {max_nodes!r}: no option can have zero nodes")
    if max_nodes > MAX_NODES:
        raise InputError(f"--max-nodes {max_nodes} is out of range (limit {MAX_NODES})")
    if budget_per_hour is not None and not budget_per_hour > 0:
        raise InputError(f"--budget-per-hour must be positive, got {budget_per_hour:g}")
    if not 0 <= headroom < 0.9:
        raise InputError(f"--headroom must be in [0, 0.9), got {headroom:g}")


def node_price(it: InstanceType, nodes: int, service: Service) -> tuple[float | None, DatedPrice | None]:
    """Price of `nodes` nodes of `it` billed by `service` in us-east-1 (None when no dated price is known)."""
    p = price(it.name, service)
    return (None, None) if p is None else (p.usd_per_hour * nodes, p)


def fmt_gib(b: float) -> str:
    return f"{b / GIB:.1f}"


def rank(options: list[Option], *, by_cost: bool) -> tuple[Option, ...]:
    def key(o: Option) -> tuple[int, int, int, float, int, float]:
        money = o.est_cost if by_cost else o.price_per_hour
        fill = (o.used_bytes_per_device or 0.0) / (o.usable_bytes_per_device or 1.0)
        # with a target: options that meet it, then those whose time is unknown, then those that miss it
        missed = 0 if o.target_days is None or o.target_met else (1 if o.target_met is None else 2)
        return (int(o.demoted), missed, 0 if money is not None else 1, money or 0.0, o.nodes, fill)

    chosen = sorted((o for o in options if o.chosen), key=key)
    cut = sorted((o for o in options if not o.chosen), key=lambda o: o.instance.name)
    return tuple(chosen + cut)


def does_not_fit(it: InstanceType, max_nodes: int, used: float, usable: float, service: Service) -> Option:
    """The cut option for a type that does not fit in `max_nodes` nodes (or in one node, without EFA)."""
    tried = max_nodes if it.efa_supported else 1
    why = f"does not fit in {max_nodes} node(s)" if it.efa_supported else "no EFA for multi-node, one node too small"
    cost, dated = node_price(it, tried, service)
    return Option(
        it,
        tried,
        False,
        f"cut: {why} ({fmt_gib(used)} > {fmt_gib(usable)} GiB usable per device)",
        used_bytes_per_device=used,
        usable_bytes_per_device=usable,
        price_per_hour=cost,
        dated_price=dated,
    )


def budget_cut(cost: float | None, nodes: int, budget: float | None) -> str | None:
    if budget is None:
        return None
    if cost is None:
        return f"cut: price unknown, cannot check the ${budget:g}/h budget"
    if cost > budget:
        return f"cut: over budget (${cost:,.2f}/h for {nodes} node(s) > ${budget:g}/h)"
    return None
