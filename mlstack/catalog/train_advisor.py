"""Training advisor: rank instance type x node count x TP/PP/DP layout, offline, from the catalog.

For each accelerator instance type the smallest node count (powers of two up to `max_nodes`) at which some layout
TP x PP x DP fits is kept, with the layout of the shortest estimated step (`mlstack.catalog.parallel`). Time comes
from the utilisation of the nearest published run (`mlstack.catalog.utilisation`), plus the EFA time per step that
does not hide behind compute, so an instance with less EFA bandwidth per device ranks lower. Prices are the dated
prices of the billing service (`mlstack.catalog.prices`); a type without one says "price unknown".

Rules carried over from the data-parallel advisor: training across nodes requires EFA; Inferentia and CPU hosts are
not training options; multi-node GPU training without GPUDirect RDMA (G-series) is kept but ranked last; a budget
per hour cuts options above it and options without a price.
"""

from __future__ import annotations

from mlstack.catalog.advice import (
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
from mlstack.catalog.fit import TRAIN_PRECISIONS, TrainingMemory, train_precision, training_memory, usable_bytes
from mlstack.catalog.instances import InstanceType, all_instances, catalog
from mlstack.catalog.memory import ModelShape
from mlstack.catalog.memory import shape_for_params as _shape
from mlstack.catalog.parallel import INTRA_NODE_GBPS, PCIE_GBPS, LayoutEstimate, choose_layout, estimate_layout
from mlstack.catalog.parallel import layouts as _layouts
from mlstack.catalog.prices import SERVICES, Service
from mlstack.catalog.utilisation import UtilisationPick, pick
from mlstack.errors import InputError

__all__ = ["TRAIN_PRECISIONS", "TrainingMemory", "advise_train", "training_memory"]

MAX_TOKENS = 1e16
DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 2**20
"""4M tokens per optimizer step (Llama 2's global batch; Llama 3 405B started at 4M and grew to 16M)."""


def _intra_gbps(it: InstanceType) -> float:
    acc = it.accelerator
    assert acc is not None
    return INTRA_NODE_GBPS[acc.model][0] if acc.model in INTRA_NODE_GBPS else PCIE_GBPS


def _layout_reason(est: LayoutEstimate, it: InstanceType) -> str:
    lay = est.layout
    link = "NeuronLink" if it.accelerator is not None and it.accelerator.kind == "trainium" else "NVLink"
    if it.accelerator is not None and it.accelerator.model not in INTRA_NODE_GBPS:
        link = "PCIe"
    parts = [lay.describe()]
    if lay.tp > 1:
        parts.append(f"TP in-node over {link}")
    if lay.pp > 1:
        parts.append(f"PP over {'EFA' if est.pp_over_efa else link}, bubble {est.bubble_s / est.compute_s:.1%}")
    if lay.dp > 1:
        parts.append(f"DP over {'EFA' if est.dp_over_efa else link}")
    if est.efa_exposed_s >= 0.005 * est.compute_s:
        parts.append(f"EFA adds {est.efa_exposed_s / est.compute_s:.0%} to each step")
    return ", ".join(parts)


def advise_train(
    params: float,
    *,
    precision: str = "bf16",
    tokens: float | None = None,
    max_nodes: int = 64,
    budget_per_hour: float | None = None,
    zero_stage: int = 1,
    headroom: float = 0.15,
    seq_len: int = 4096,
    micro_batch: int = 1,
    mfu: float | None = None,
    shape: ModelShape | None = None,
    global_batch_tokens: float = DEFAULT_GLOBAL_BATCH_TOKENS,
    pricing: Service = "ec2_on_demand",
) -> Advice:
    """Rank instance type x node count x layout for training (ZeRO stage over DP, default 1 = Megatron's
    distributed optimizer; full activation checkpointing; sequence parallelism with TP).

    `mfu` overrides the utilisation table (the published run nearest to the model is used when it is None).
    """
    check_common(params, max_nodes, budget_per_hour, headroom)
    key = train_precision(precision)
    if tokens is not None and not 0 < tokens <= MAX_TOKENS:
        raise InputError(f"--tokens must be in (0, {MAX_TOKENS:g}], got {tokens:g}")
    if mfu is not None and not 0 < mfu <= 1:
        raise InputError(f"--mfu must be in (0, 1], got {mfu:g}")
    if zero_stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if pricing not in SERVICES:
        raise InputError(f"--pricing must be one of {', '.join(SERVICES)}, got {pricing!r}")
    if not 1e4 <= global_batch_tokens <= 1e9:
        raise InputError(f"--global-batch-tokens must be in [1e4, 1e9], got {global_batch_tokens:g}")
    param_bytes, grad_bytes, k = TRAIN_PRECISIONS[key]
    shape = shape or _shape(params)
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
        usable = usable_bytes(acc.memory_gib, headroom)
        peak = catalog().peak_tflops(it)
        util: UtilisationPick = pick(acc.model, params, key)
        eff_mfu = mfu if mfu is not None else util.mfu

        def _estimates(
            n: int, it: InstanceType = it, peak: float | None = peak, count: int = acc.count, mfu_: float = eff_mfu
        ) -> list[LayoutEstimate]:
            return [
                estimate_layout(
                    lay,
                    params=params,
                    shape=shape,
                    zero_stage=zero_stage,
                    param_bytes=param_bytes,
                    grad_bytes=grad_bytes,
                    optimizer_multiplier=k,
                    seq_len=seq_len,
                    micro_batch=micro_batch,
                    global_batch_tokens=global_batch_tokens,
                    devices_per_node=count,
                    peak_tflops=peak or 100.0,
                    mfu=mfu_,
                    intra_gbps=_intra_gbps(it),
                    efa_gbps_per_node=it.efa_gbps,
                )
                for lay in _layouts(count, n, shape)
            ]

        best: LayoutEstimate | None = None
        nodes = 1
        smallest = float("inf")
        for n in counts if it.efa_supported else [1]:
            cands = _estimates(n)
            smallest = min((c.total_bytes for c in cands), default=smallest)
            best = choose_layout(cands, usable)
            nodes = n
            if best is not None:
                break
        if best is None:
            options.append(does_not_fit(it, max_nodes, smallest, usable, pricing))
            continue
        cost, dated = node_price(it, nodes, pricing)
        reason = budget_cut(cost, nodes, budget_per_hour)
        est_hours = est_cost = None
        if tokens is not None and peak is not None:
            base = 6.0 * params * tokens / (nodes * acc.count * peak * 1e12 * eff_mfu * util.goodput) / 3600.0
            est_hours = base * (1 + best.efa_exposed_s / best.compute_s)
            est_cost = None if cost is None else est_hours * cost
        demoted = nodes > 1 and it.gpudirect_rdma is False and acc.kind == "gpu"
        if reason is None:
            parts = [f"fits: {fmt_gib(best.total_bytes)}/{fmt_gib(usable)} GiB per device", _layout_reason(best, it)]
            if nodes > 1:
                parts.append(f"EFA {it.efa_gbps:g} Gbps/node")
                if demoted:
                    parts.append("ranked last: no GPUDirect RDMA, slow collectives")
            if cost is None:
                parts.append(f"price unknown ({pricing})")
            if tokens is not None and peak is None:
                parts.append("time unknown (no peak TFLOPS in catalog)")
            reason = "; ".join(parts)
        options.append(
            Option(
                it,
                nodes,
                not reason.startswith("cut:"),
                reason,
                used_bytes_per_device=best.total_bytes,
                usable_bytes_per_device=usable,
                price_per_hour=cost,
                est_hours=est_hours,
                est_cost=est_cost,
                demoted=demoted,
                dated_price=dated,
                layout=best,
                utilisation=util,
            )
        )
    mfu_text = (
        f"MFU {mfu:.0%} (given)"
        if mfu is not None
        else "MFU per option from the nearest published run (data/utilisation.yaml; shown per option)"
    )
    assumptions = (
        f"model states: TP x PP shard, ZeRO-{zero_stage} over DP, {key} Adam (K={k:g}) [Rajbhandari et al. 2020; "
        "Megatron-LM distributed optimizer]" + (", plus 2 layers of gathered weights" if zero_stage == 3 else ""),
        f"activations: full checkpointing, flash attention, sequence parallel over TP, 1F1B pipeline, seq {seq_len}, "
        f"micro-batch {micro_batch} [Korthikanti et al. 2022]; shape {shape.describe()}",
        f"layout: TP within a node (NVLink/NeuronLink), PP and DP across nodes over EFA; global batch "
        f"{global_batch_tokens / 2**20:g}M tokens; shortest estimated step wins",
        f"fits = per-device estimate <= {1 - headroom:.0%} of device memory (headroom {headroom:.0%})",
        f"time = 6 x params x tokens / (devices x peak dense bf16 TFLOPS x MFU x goodput) + EFA time not hidden "
        f"behind compute; {mfu_text}",
        f"prices: {pricing} us-east-1, dated per row (data/training_prices.yaml); unknown prices are not estimated",
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
        "global_batch_tokens": global_batch_tokens,
        "pricing": pricing,
    }
    return Advice("train", inputs, assumptions, rank(options, by_cost=tokens is not None))
