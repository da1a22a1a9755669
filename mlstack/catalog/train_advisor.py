"""Training advisor: rank instance type x node count x TP/PP/DP layout, offline, from the catalog.

For each accelerator instance type the smallest node count (powers of two up to `max_nodes`) at which some layout
TP x PP x DP fits is kept, with the layout of the shortest estimated step (`mlstack.catalog.parallel`). With a
wall-clock target (`target_days`) the option then scales out data parallelism, the same TP x PP per replica, until
the estimated time meets the target or a limit is reached (`mlstack.catalog.scale_out`). Time comes
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
from mlstack.catalog.parallel import (
    INTRA_NODE_GBPS,
    PCIE_GBPS,
    Layout,
    LayoutEstimate,
    choose_layout,
    estimate_layout,
)
from mlstack.catalog.parallel import layouts as _layouts
from mlstack.catalog.prices import SERVICES, Service
from mlstack.catalog.scale_out import ScaleOut, node_step, scale_out
from mlstack.catalog.utilisation import UtilisationPick, pick
from mlstack.errors import InputError

__all__ = ["DEFAULT_TRAIN_MAX_NODES", "TRAIN_PRECISIONS", "TrainingMemory", "advise_train", "training_memory"]

MAX_TOKENS = 1e16
DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 2**20
"""4M tokens per optimizer step (Llama 2's global batch; Llama 3 405B started at 4M and grew to 16M)."""
DEFAULT_TRAIN_MAX_NODES = 2048
"""16,384 devices on 8-GPU nodes: the largest published single training job read (Llama 3 405B on 16K H100,
arXiv:2407.21783). Set --max-nodes to the capacity you can actually reserve."""
MAX_TARGET_DAYS = 3650.0
BUBBLE_WARN = 0.25
"""Warn when the 1F1B pipeline bubble (PP-1)/micro-batches passes this share of compute: scaling out DP at a fixed
global batch leaves fewer micro-batches per replica (Narayanan et al. 2021, arXiv:2104.04473, section 2.2.1)."""


def _intra_gbps(it: InstanceType) -> float:
    acc = it.accelerator
    assert acc is not None
    return INTRA_NODE_GBPS[acc.model][0] if acc.model in INTRA_NODE_GBPS else PCIE_GBPS


def _train_hours(
    est: LayoutEstimate, params: float, tokens: float, devices: int, peak: float, mfu: float, goodput: float
) -> float:
    """6 x params x tokens / (devices x peak x MFU x goodput), plus the EFA time per step not hidden behind compute."""
    base = 6.0 * params * tokens / (devices * peak * 1e12 * mfu * goodput) / 3600.0
    return base * (1 + est.efa_exposed_s / est.compute_s)


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
    max_nodes: int = DEFAULT_TRAIN_MAX_NODES,
    target_days: float | None = None,
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
    Without `target_days` each option is the smallest node count that fits; with it (needs `tokens`), each option
    scales out data parallelism until its estimated time meets the target, within `max_nodes`, the budget per hour
    and the global batch, and says so in one line (`Option.target_note`) when it can not.
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
    if target_days is not None:
        if tokens is None:
            raise InputError("--days needs --tokens: the time to meet depends on the token count")
        if not 0 < target_days <= MAX_TARGET_DAYS:
            raise InputError(f"--days must be in (0, {MAX_TARGET_DAYS:g}], got {target_days:g}")
    sequences_per_step = max(1, int(global_batch_tokens // (seq_len * micro_batch)))
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
        util: UtilisationPick = pick(acc.model, params, key, seq_len=seq_len, layers=shape.layers, hidden=shape.hidden)
        eff_mfu = mfu if mfu is not None else util.mfu

        def _estimates(
            n: int,
            it: InstanceType = it,
            peak: float | None = peak,
            count: int = acc.count,
            mfu_: float = eff_mfu,
            only: list[Layout] | None = None,
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
                for lay in (_layouts(count, n, shape) if only is None else only)
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
        min_nodes = nodes
        scaled: ScaleOut | None = None
        if target_days is not None and tokens is not None and peak is not None and reason is None:
            tp, pp, count = best.layout.tp, best.layout.pp, acc.count
            step = node_step(tp * pp, count)

            def _at(n: int, tp: int = tp, pp: int = pp, count: int = count) -> LayoutEstimate:
                return _estimates(n, only=[Layout(tp, pp, n * count // (tp * pp))])[0]

            def _hours(
                n: int, peak: float = peak, mfu_: float = eff_mfu, good: float = util.goodput, count: int = count
            ) -> float:
                return _train_hours(_at(n), params, tokens, n * count, peak, mfu_, good)

            per_node = None if cost is None else cost / nodes
            scaled = scale_out(
                min_nodes=nodes,
                step=step,
                target_hours=target_days * 24,
                hours_at=_hours,
                max_nodes=max_nodes,
                batch_nodes=sequences_per_step * tp * pp // count // step * step,
                budget_nodes=None
                if budget_per_hour is None or per_node is None
                else int(budget_per_hour // per_node) // step * step,
                multi_node=it.efa_supported,
            )
            if scaled.nodes != nodes:
                nodes, best = scaled.nodes, _at(scaled.nodes)
                cost, dated = node_price(it, nodes, pricing)
        est_hours = est_cost = None
        if tokens is not None and peak is not None:
            est_hours = _train_hours(best, params, tokens, nodes * acc.count, peak, eff_mfu, util.goodput)
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
                if target_days is not None:
                    parts.append("target not checked")
            if best.bubble_s > BUBBLE_WARN * best.compute_s:
                parts.append(
                    f"warning: {best.micro_batches} micro-batch(es) per replica for PP{best.layout.pp}, the bubble is "
                    "not in the time (the published MFU covers its own schedule); raise --global-batch-tokens"
                )
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
                min_nodes=min_nodes,
                target_days=target_days,
                target_met=None if scaled is None else scaled.met,
                target_note=None if scaled is None else scaled.note,
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
        f"nodes: smallest count that fits (powers of two up to {max_nodes}); no target, --days N sizes to a deadline"
        if target_days is None
        else f"nodes: smallest count that fits, then more DP replicas (same TP x PP) until the time meets "
        f"{target_days:g} days, within --max-nodes {max_nodes}, the budget and the global batch; DP traffic over EFA "
        "makes the gain less than linear",
    )
    inputs: dict[str, object] = {
        "params": params,
        "precision": key,
        "tokens": tokens,
        "max_nodes": max_nodes,
        "days": target_days,
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
