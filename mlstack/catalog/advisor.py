"""Advisor: rank instance type x node count for a training or inference task, offline, from the catalog.

Every option says why it was chosen or cut. Training lives in `mlstack.catalog.train_advisor` (TP x PP x DP
layouts, utilisation from published runs, dated prices); this module serves inference and re-exports the whole API.

Inference rules:
- an option fits when weights + KV cache, sharded over every device of the option, are at most (1 - headroom) x
  device memory (CPU hosts: host RAM less an OS reserve);
- multi-node serving requires EFA and is offered only when no single-node option fits;
- CPU hosts serve only small models (`cpu_max_params`, default 3B parameters);
- a budget per hour cuts options above it, and options whose price is unknown (they cannot be checked);
- ranking by $/h (dated EC2 on-demand prices; SageMaker hosting bills ml.* at its own rates), unknown prices last;
  ties broken by fewer nodes, then by memory headroom.
"""

from __future__ import annotations

from mlstack.catalog.advice import (
    CPU_OS_RESERVE_GIB,
    Advice,
    Option,
    budget_cut,
    check_common,
    does_not_fit,
    fmt_gib,
    node_counts,
    node_price,
    rank,
)
from mlstack.catalog.instances import all_instances
from mlstack.catalog.memory import GIB, ModelShape, inference_memory, precision_bytes, shape_for_params
from mlstack.catalog.prices import Service
from mlstack.catalog.train_advisor import TRAIN_PRECISIONS, TrainingMemory, advise_train, training_memory
from mlstack.errors import InputError

__all__ = [
    "TRAIN_PRECISIONS",
    "Advice",
    "Option",
    "TrainingMemory",
    "advise_infer",
    "advise_train",
    "node_counts",
    "training_memory",
]

SERVICE: Service = "ec2_on_demand"


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
    check_common(params, max_nodes, budget_per_hour, headroom)
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
                        f"cut: needs {fmt_gib(total)} GiB > {fmt_gib(usable)} GiB usable RAM",
                        total,
                        usable,
                        node_price(it, 1, SERVICE)[0],
                        dated_price=node_price(it, 1, SERVICE)[1],
                    )
                )
                continue
            cpu = "Intel AMX (bf16/int8 tiles)" if it.intel_amx else ("Graviton (arm64)" if it.graviton else "no AMX")
            cost, dated = node_price(it, 1, SERVICE)
            reason = budget_cut(cost, 1, budget_per_hour) or (
                f"fits in RAM: {fmt_gib(total)}/{fmt_gib(usable)} GiB; {cpu}; CPU latency per token is high"
                + ("; price unknown" if cost is None else "")
            )
            options.append(Option(it, 1, not reason.startswith("cut:"), reason, total, usable, cost, dated_price=dated))
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
            options.append(does_not_fit(it, max_nodes, total / (tried * acc.count), usable, SERVICE))
            continue
        nodes, used = fit
        cost, dated = node_price(it, nodes, SERVICE)
        reason_cut = budget_cut(cost, nodes, budget_per_hour)
        if reason_cut is None:
            parts = [f"fits: {fmt_gib(used)}/{fmt_gib(usable)} GiB per device over {nodes * acc.count} device(s)"]
            if nodes > 1:
                parts.append(f"multi-node over EFA {it.efa_gbps:g} Gbps/node")
            if acc.kind != "gpu":
                parts.append("needs a Neuron-compiled model")
            if cost is None:
                parts.append("price unknown")
            reason = "; ".join(parts)
        else:
            reason = reason_cut
        options.append(
            Option(it, nodes, reason_cut is None, reason, used, usable, cost, dated_price=dated),
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
                dated_price=o.dated_price,
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
        "prices: EC2 on-demand us-east-1, dated per row (data/training_prices.yaml); SageMaker hosting bills ml.* at "
        "its own rates; unknown prices are not estimated",
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
    return Advice("infer", inputs, assumptions, rank(options, by_cost=False))
