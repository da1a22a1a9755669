"""Advisor: rank instance type x node count for a training or inference task, offline, from the catalog.

Every option says why it was chosen or cut. Numbers are estimates from `mlstack.catalog.memory` (ZeRO paper model
states, Korthikanti et al. activations, weights + KV cache for inference) and catalog prices (undated snapshot, see
`data/instances.yaml`); the assumptions behind each run are returned with the options and printed by the CLI.

Rules:
- an option fits when the per-device estimate is at most (1 - headroom) x device memory (CPU hosts: host RAM less
  an OS reserve);
- training across more than one node requires EFA ("cut: no EFA for multi-node"); multi-node inference likewise;
- training is not offered on Inferentia or CPU hosts; CPU hosts serve inference only for small models
  (`cpu_max_params`, default 3B parameters);
- multi-node serving is offered only when no single-node option fits;
- multi-node GPU training without GPUDirect RDMA (G-series, domain.md pitfall P4) is kept but ranked last;
- a budget per hour cuts options above it, and options whose price is unknown (they cannot be checked);
- ranking: training by estimated cost when a token budget is given, else by $/h; inference by $/h; unknown prices
  last; ties broken by fewer nodes, then by memory headroom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from mlstack.catalog.instances import InstanceType, all_instances, catalog
from mlstack.catalog.memory import (
    GIB,
    MAX_PARAMS,
    ModelShape,
    ModelStateMemory,
    activation_memory,
    inference_memory,
    model_state_memory,
    precision_bytes,
    shape_for_params,
)
from mlstack.errors import InputError

__all__ = ["Advice", "Option", "TrainingMemory", "advise_infer", "advise_train", "node_counts", "training_memory"]

Task = Literal["train", "infer"]

CPU_OS_RESERVE_GIB = 4.0
"""Host RAM left to the OS and the serving process on CPU hosts."""
TRAIN_PRECISIONS = {"bf16": (2.0, 2.0, 12.0), "fp16": (2.0, 2.0, 12.0), "fp32": (4.0, 4.0, 8.0)}
"""precision -> (param bytes, grad bytes, optimizer multiplier K): mixed-precision Adam K=12; pure fp32 Adam K=8."""
MAX_TOKENS = 1e16
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
    """For all nodes together; None when the catalog has no price."""
    est_hours: float | None = None
    est_cost: float | None = None
    demoted: bool = False
    """Ranked after the other chosen options (multi-node GPU training without GPUDirect RDMA)."""

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
            "price_source": self.instance.price_source if self.price_per_hour is not None else None,
            "est_hours": self.est_hours,
            "est_cost": self.est_cost,
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

    def to_json(self) -> dict[str, object]:
        return {
            "task": self.task,
            "inputs": self.inputs,
            "assumptions": list(self.assumptions),
            "catalog_version": catalog().version,
            "chosen": [o.to_json() for o in self.chosen],
            "cut": [o.to_json() for o in self.cut],
        }


def node_counts(max_nodes: int) -> list[int]:
    """Node counts tried: powers of two up to `max_nodes`, plus `max_nodes` itself."""
    counts = [2**i for i in range(int(math.log2(max_nodes)) + 1)]
    if counts[-1] != max_nodes:
        counts.append(max_nodes)
    return counts


def _check_common(params: float, max_nodes: int, budget_per_hour: float | None, headroom: float) -> None:
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


def _price(it: InstanceType, nodes: int) -> float | None:
    return None if it.price_per_hour is None else it.price_per_hour * nodes


def _fmt_gib(b: float) -> str:
    return f"{b / GIB:.1f}"


def _rank(options: list[Option], *, by_cost: bool) -> tuple[Option, ...]:
    def key(o: Option) -> tuple[int, int, float, int, float]:
        money = o.est_cost if by_cost else o.price_per_hour
        fill = (o.used_bytes_per_device or 0.0) / (o.usable_bytes_per_device or 1.0)
        return (int(o.demoted), 0 if money is not None else 1, money if money is not None else 0.0, o.nodes, fill)

    chosen = sorted((o for o in options if o.chosen), key=key)
    cut = sorted((o for o in options if not o.chosen), key=lambda o: o.instance.name)
    return tuple(chosen + cut)


def _does_not_fit(it: InstanceType, max_nodes: int, used: float, usable: float) -> Option:
    """The cut option for a type that does not fit in `max_nodes` nodes (or in one node, without EFA)."""
    tried = max_nodes if it.efa_supported else 1
    why = f"does not fit in {max_nodes} node(s)" if it.efa_supported else "no EFA for multi-node, one node too small"
    return Option(
        it,
        tried,
        False,
        f"cut: {why} ({_fmt_gib(used)} > {_fmt_gib(usable)} GiB usable per device)",
        used_bytes_per_device=used,
        usable_bytes_per_device=usable,
        price_per_hour=_price(it, tried),
    )


def _budget_cut(it: InstanceType, nodes: int, budget: float | None) -> str | None:
    if budget is None:
        return None
    price = _price(it, nodes)
    if price is None:
        return f"cut: price unknown, cannot check the ${budget:g}/h budget"
    if price > budget:
        return f"cut: over budget (${price:,.2f}/h for {nodes} node(s) > ${budget:g}/h)"
    return None


@dataclass(frozen=True)
class TrainingMemory:
    """Per-device training memory: model states + activations + ZeRO-3 gather buffers (bytes)."""

    states: ModelStateMemory
    activations_bytes: float
    gather_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.states.total_bytes + self.activations_bytes + self.gather_bytes


def training_memory(
    params: float,
    devices: int,
    *,
    precision: str = "bf16",
    zero_stage: int = 3,
    seq_len: int = 4096,
    micro_batch: int = 1,
    shape: ModelShape | None = None,
) -> TrainingMemory:
    """Per-device bytes for data-parallel training with ZeRO over `devices` accelerators.

    Model states per the ZeRO paper (mixed-precision Adam, K=12; fp32 Adam K=8), activations with full
    checkpointing and flash attention (Korthikanti et al. 2022, no tensor parallelism), and for ZeRO-3 two layers
    of gathered 16-bit weights (the layer being computed and the prefetched next one). `shape` defaults to the
    published architecture nearest to `params`. Used by the advisor and by `mlstack plan`'s fit check.
    """
    key = precision.lower()
    if key not in TRAIN_PRECISIONS:
        raise InputError(
            f"training precision must be one of {', '.join(TRAIN_PRECISIONS)} (got {precision!r}); "
            "fp8/int training keeps bf16 master weights, model it as bf16"
        )
    param_bytes, grad_bytes, k = TRAIN_PRECISIONS[key]
    shape = shape or shape_for_params(params)
    states = model_state_memory(
        params, devices, zero_stage, optimizer_multiplier=k, param_bytes=param_bytes, grad_bytes=grad_bytes
    )
    acts = activation_memory(
        layers=shape.layers,
        hidden=shape.hidden,
        seq_len=seq_len,
        micro_batch=micro_batch,
        heads=shape.heads,
        checkpointing="full",
        flash_attention=True,
    ).total_bytes
    gather = 2 * param_bytes * params / shape.layers if zero_stage == 3 else 0.0
    return TrainingMemory(states=states, activations_bytes=acts, gather_bytes=gather)


def advise_train(
    params: float,
    *,
    precision: str = "bf16",
    tokens: float | None = None,
    max_nodes: int = 64,
    budget_per_hour: float | None = None,
    zero_stage: int = 3,
    headroom: float = 0.15,
    seq_len: int = 4096,
    micro_batch: int = 1,
    mfu: float = 0.40,
    shape: ModelShape | None = None,
) -> Advice:
    """Rank instance type x node count for data-parallel training with ZeRO (default stage 3, full checkpointing)."""
    _check_common(params, max_nodes, budget_per_hour, headroom)
    key = precision.lower()
    if key not in TRAIN_PRECISIONS:
        raise InputError(
            f"training precision must be one of {', '.join(TRAIN_PRECISIONS)} (got {precision!r}); "
            "fp8/int training keeps bf16 master weights, model it as bf16"
        )
    if tokens is not None and not 0 < tokens <= MAX_TOKENS:
        raise InputError(f"--tokens must be in (0, {MAX_TOKENS:g}], got {tokens:g}")
    if not 0 < mfu <= 1:
        raise InputError(f"--mfu must be in (0, 1], got {mfu:g}")
    if zero_stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    shape = shape or shape_for_params(params)
    counts = node_counts(max_nodes)
    options: list[Option] = []
    for it in all_instances():
        acc = it.accelerator
        if acc is None:
            options.append(Option(it, 1, False, "cut: CPU host (training not advised on CPUs)"))
            continue
        if acc.kind == "inferentia":
            options.append(Option(it, 1, False, "cut: Inferentia is an inference accelerator"))
            continue
        usable = acc.memory_gib * GIB * (1 - headroom)
        fit: tuple[int, float] | None = None
        last_used = 0.0

        def _train_bytes(n: int, count: int = acc.count) -> float:
            return training_memory(
                params,
                n * count,
                precision=key,
                zero_stage=zero_stage,
                seq_len=seq_len,
                micro_batch=micro_batch,
                shape=shape,
            ).total_bytes

        for n in counts:
            last_used = _train_bytes(n)
            if last_used <= usable:
                fit = (n, last_used)
                break
        if fit is None or (fit[0] > 1 and not it.efa_supported):
            at = last_used if it.efa_supported else _train_bytes(1)
            options.append(_does_not_fit(it, max_nodes, at, usable))
            continue
        nodes, used = fit
        price = _price(it, nodes)
        reason = _budget_cut(it, nodes, budget_per_hour)
        est_hours = est_cost = None
        peak = catalog().peak_tflops(it)
        if tokens is not None and peak is not None:
            flops = 6.0 * params * tokens
            est_hours = flops / (nodes * acc.count * peak * 1e12 * mfu) / 3600.0
            est_cost = None if price is None else est_hours * price
        demoted = nodes > 1 and it.gpudirect_rdma is False and acc.kind == "gpu"
        if reason is None:
            parts = [f"fits: {_fmt_gib(used)}/{_fmt_gib(usable)} GiB per device at {nodes * acc.count} device(s)"]
            if nodes > 1:
                parts.append(f"EFA {it.efa_gbps:g} Gbps/node")
                if demoted:
                    parts.append("ranked last: no GPUDirect RDMA, slow collectives")
            if price is None:
                parts.append("price unknown")
            if tokens is not None and peak is None:
                parts.append("time unknown (no peak TFLOPS in catalog)")
            reason = "; ".join(parts)
        options.append(
            Option(
                it,
                nodes,
                not reason.startswith("cut:"),
                reason,
                used_bytes_per_device=used,
                usable_bytes_per_device=usable,
                price_per_hour=price,
                est_hours=est_hours,
                est_cost=est_cost,
                demoted=demoted,
            )
        )
    assumptions = (
        f"model states: ZeRO-{zero_stage}, {key} Adam (K={TRAIN_PRECISIONS[key][2]:g}) [Rajbhandari et al. 2020]"
        + (", plus 2 layers of gathered weights" if zero_stage == 3 else ""),
        f"activations: full checkpointing, flash attention, seq {seq_len}, micro-batch {micro_batch}, no tensor "
        f"parallelism [Korthikanti et al. 2022]; shape {shape.describe()}",
        f"fits = per-device estimate <= {1 - headroom:.0%} of device memory (headroom {headroom:.0%})",
        f"time = 6 x params x tokens / (devices x peak dense bf16 TFLOPS x MFU {mfu:.0%}); cost = time x $/h",
        "prices: us-east-1 on-demand from an undated snapshot (P-family pre-June-2025, likely high); "
        "re-price before deciding",
    )
    inputs: dict[str, object] = {
        "params": params,
        "precision": key,
        "tokens": tokens,
        "max_nodes": max_nodes,
        "budget_per_hour": budget_per_hour,
        "zero_stage": zero_stage,
        "headroom": headroom,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "mfu": mfu,
    }
    return Advice("train", inputs, assumptions, _rank(options, by_cost=tokens is not None))


def advise_infer(
    params: float,
    *,
    precision: str = "bf16",
    context: int = 4096,
    concurrency: int = 1,
    max_nodes: int = 4,
    budget_per_hour: float | None = None,
    headroom: float = 0.15,
    cpu_max_params: float = 3e9,
    shape: ModelShape | None = None,
) -> Advice:
    """Rank instance type x node count for serving: weights at `precision` + a bf16 KV cache for
    `concurrency` sequences of `context` tokens, tensor-parallel over every device of the option."""
    _check_common(params, max_nodes, budget_per_hour, headroom)
    wbytes = precision_bytes(precision)
    for name, value, limit in (("--context", context, 10_000_000), ("--concurrency", concurrency, 100_000)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise InputError(f"{name} must be an integer in [1, {limit}], got {value!r}")
    shape = shape or shape_for_params(params)
    need = inference_memory(
        params,
        precision=precision,
        layers=shape.layers,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        context=context,
        batch=concurrency,
    )
    total = need.total_bytes
    counts = node_counts(max_nodes)
    options: list[Option] = []
    for it in all_instances():
        acc = it.accelerator
        if acc is None:
            usable = (it.memory_gib - CPU_OS_RESERVE_GIB) * GIB * (1 - headroom)
            if params > cpu_max_params:
                options.append(
                    Option(it, 1, False, f"cut: CPU hosts only for models <= {cpu_max_params:g} params", total, usable)
                )
                continue
            if total > usable:
                options.append(
                    Option(
                        it,
                        1,
                        False,
                        f"cut: needs {_fmt_gib(total)} GiB > {_fmt_gib(usable)} GiB usable RAM",
                        total,
                        usable,
                        _price(it, 1),
                    )
                )
                continue
            cpu = "Intel AMX (bf16/int8 tiles)" if it.intel_amx else ("Graviton (arm64)" if it.graviton else "no AMX")
            reason = _budget_cut(it, 1, budget_per_hour) or (
                f"fits in RAM: {_fmt_gib(total)}/{_fmt_gib(usable)} GiB; {cpu}; CPU latency per token is high"
                + ("; price unknown" if it.price_per_hour is None else "")
            )
            options.append(Option(it, 1, not reason.startswith("cut:"), reason, total, usable, _price(it, 1)))
            continue
        usable = acc.memory_gib * GIB * (1 - headroom)
        fit: tuple[int, float] | None = None
        used = total / acc.count
        for n in counts:
            used = total / (n * acc.count)
            if used <= usable:
                fit = (n, used)
                break
        if fit is None or (fit[0] > 1 and not it.efa_supported):
            tried = max_nodes if it.efa_supported else 1
            options.append(_does_not_fit(it, max_nodes, total / (tried * acc.count), usable))
            continue
        nodes, used = fit
        reason_cut = _budget_cut(it, nodes, budget_per_hour)
        if reason_cut is None:
            parts = [f"fits: {_fmt_gib(used)}/{_fmt_gib(usable)} GiB per device over {nodes * acc.count} device(s)"]
            if nodes > 1:
                parts.append(f"multi-node over EFA {it.efa_gbps:g} Gbps/node")
            if acc.kind != "gpu":
                parts.append("needs a Neuron-compiled model")
            if it.price_per_hour is None:
                parts.append("price unknown")
            reason = "; ".join(parts)
        else:
            reason = reason_cut
        options.append(
            Option(it, nodes, reason_cut is None, reason, used, usable, _price(it, nodes)),
        )
    if any(o.chosen and o.nodes == 1 for o in options):
        options = [
            o
            if not (o.chosen and o.nodes > 1)
            else Option(
                o.instance,
                o.nodes,
                False,
                f"cut: needs {o.nodes} nodes while single-node options fit (multi-node serving only when none does)",
                o.used_bytes_per_device,
                o.usable_bytes_per_device,
                o.price_per_hour,
            )
            for o in options
        ]
    assumptions = (
        f"weights {params:g} x {wbytes:g} B ({precision}) = {need.weights_bytes / GIB:.1f} GiB; KV cache bf16 "
        f"2 x {shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} x {context} tokens x {concurrency} "
        f"= {need.kv_cache_bytes / GIB:.1f} GiB; shape {shape.describe()}",
        "sharded evenly over every device of the option (tensor parallel); activations and runtime buffers are "
        f"covered by the {headroom:.0%} headroom",
        f"CPU hosts: host RAM less {CPU_OS_RESERVE_GIB:g} GiB for the OS, models <= {cpu_max_params:g} params only",
        "multi-node serving only when no single node fits",
        "prices: us-east-1 on-demand from an undated snapshot; re-price before deciding",
    )
    inputs: dict[str, object] = {
        "params": params,
        "precision": precision,
        "context": context,
        "concurrency": concurrency,
        "max_nodes": max_nodes,
        "budget_per_hour": budget_per_hour,
        "headroom": headroom,
    }
    return Advice("infer", inputs, assumptions, _rank(options, by_cost=False))
