"""Inference advisor: rank instance type x tensor-parallel degree x node count by $ per million output tokens.

Rules:
- an option fits when weights + a bf16 KV cache for `concurrency` sequences of context + output tokens, sharded
  over the replica's devices, are at most (1 - headroom) x device memory (CPU hosts: host RAM less an OS reserve);
- per instance every tensor-parallel degree that divides its device count and the attention heads is estimated
  (`serving_model`); the node runs devices / TP replicas, each at `concurrency`; the degree with the most output
  tokens/s that meets the latency targets is the option (same price, so the lowest $ per million tokens);
- multi-node serving (one replica over every device of the nodes) requires EFA and is offered only when no
  single-node option fits;
- Inferentia (inf1, NeuronCore-v1) is cut: AWS's LLM libraries for Neuron run decoder LLMs on NeuronCore-v2 and
  later only (Transformers NeuronX developer guide: "for Trn1 and Inf2"; NxD Inference likewise targets Trn1/Inf2/
  Trn2), and an Inferentia chip reads its 8 GiB at 50 GiB/s (Inferentia Architecture, awsdocs-neuron);
- CPU hosts serve only small models (`cpu_max_params`) and have no estimate (no bandwidth figure in the catalog);
- `--ttft-ms` / `--tpot-ms` cut options whose estimate misses them, or that have no estimate to check;
- a budget per hour cuts options above it, and options whose price is unknown;
- ranking: $ per million output tokens; then options with an estimate but no price, most tokens/s first; then
  those without an estimate, by $/h (unknown prices last); ties broken by fewer nodes, then by memory headroom.
"""

from __future__ import annotations

from dataclasses import dataclass

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
)
from mlstack.catalog.instances import InstanceType, all_instances
from mlstack.catalog.memory import GIB, ModelShape, inference_memory, precision_bytes, shape_for_params
from mlstack.catalog.prices import Service
from mlstack.catalog.serving_model import (
    ServingEstimate,
    efficiency_for,
    estimate_serving,
    hardware_for,
    kv_bytes_per_token,
)
from mlstack.errors import InputError

__all__ = ["INF1_CUT", "advise_infer"]

SERVICE: Service = "ec2_on_demand"
INF1_CUT = (
    "cut: Inferentia (inf1, NeuronCore-v1) does not serve decoder LLMs: the Neuron LLM libraries (Transformers "
    "NeuronX, NxD Inference) run on NeuronCore-v2 and later (Inf2, Trn1, Trn2)"
)


def _check_int(name: str, value: int | None, limit: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InputError(f"{name} must be an integer in [1, {limit}], got {value!r}")


def _check_target(name: str, value: float | None) -> None:
    if value is not None and not 0 < value <= 3_600_000:
        raise InputError(f"{name} must be a positive number of milliseconds (at most one hour), got {value:g}")


def _misses(est: ServingEstimate, ttft_ms: float | None, tpot_ms: float | None) -> str | None:
    if ttft_ms is not None and est.ttft_s * 1e3 > ttft_ms:
        return f"TTFT {est.ttft_s * 1e3:,.0f} ms > --ttft-ms {ttft_ms:g}"
    if tpot_ms is not None and est.tpot_s * 1e3 > tpot_ms:
        return f"TPOT {est.tpot_s * 1e3:,.1f} ms > --tpot-ms {tpot_ms:g}"
    return None


def _tp_degrees(count: int, heads: int) -> list[int]:
    return [t for t in range(1, count + 1) if count % t == 0 and heads % t == 0]


def _cpu_option(it: InstanceType, params: float, total: float, cpu_max_params: float, ctx: _Ctx) -> Option:
    usable = (it.memory_gib - CPU_OS_RESERVE_GIB) * GIB * (1 - ctx.headroom)
    if params > cpu_max_params:
        return Option(it, 1, False, f"cut: CPU hosts only for models <= {cpu_max_params:g} params", total, usable)
    cost, dated = node_price(it, 1, SERVICE)
    if total > usable:
        why = f"cut: needs {fmt_gib(total)} GiB > {fmt_gib(usable)} GiB usable RAM"
        return Option(it, 1, False, why, total, usable, cost, dated_price=dated)
    if ctx.targets:
        why = "cut: CPU host: no serving estimate (no memory bandwidth in the catalog), cannot check the latency target"
        return Option(it, 1, False, why, total, usable, cost, dated_price=dated)
    cpu = "Intel AMX (bf16/int8 tiles)" if it.intel_amx else ("Graviton (arm64)" if it.graviton else "no AMX")
    reason = budget_cut(cost, 1, ctx.budget) or (
        f"fits in RAM: {fmt_gib(total)}/{fmt_gib(usable)} GiB; {cpu}; CPU latency per token is high; no "
        "throughput estimate" + ("; price unknown" if cost is None else "")
    )
    return Option(it, 1, not reason.startswith("cut:"), reason, total, usable, cost, dated_price=dated)


@dataclass(frozen=True)
class _Ctx:
    """The request, shared by every option."""

    params: float
    precision: str
    wbytes: float
    kv_token: float
    context: int
    output_tokens: int
    concurrency: int
    ttft_ms: float | None
    tpot_ms: float | None
    budget: float | None
    headroom: float
    max_nodes: int

    @property
    def targets(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


def _accelerator_option(it: InstanceType, total: float, shape: ModelShape, ctx: _Ctx) -> Option:
    acc = it.accelerator
    assert acc is not None
    if acc.model == "Inferentia":
        return Option(it, 1, False, INF1_CUT)
    usable = acc.memory_gib * GIB * (1 - ctx.headroom)
    # (nodes, tp, replicas per node): single-node degrees first, then one replica over n whole nodes
    layouts = [(1, t, acc.count // t) for t in _tp_degrees(acc.count, shape.heads) if total / t <= usable]
    if not layouts:
        for n in node_counts(ctx.max_nodes)[1:]:
            if total / (n * acc.count) <= usable:
                layouts = [(n, n * acc.count, 1)]
                break
    if not layouts or (layouts[0][0] > 1 and not it.efa_supported):
        tried = ctx.max_nodes if it.efa_supported else 1
        return does_not_fit(it, ctx.max_nodes, total / (tried * acc.count), usable, SERVICE)
    hw = hardware_for(it)
    nodes = layouts[0][0]
    cost, dated = node_price(it, nodes, SERVICE)
    extra: list[str] = []
    if nodes > 1:
        extra.append(f"multi-node over EFA {it.efa_gbps:g} Gbps/node (estimate ignores inter-node latency)")
    if acc.kind != "gpu":
        extra.append("needs a Neuron-compiled model")
    if cost is None:
        extra.append("price unknown")
    if hw is None:
        n, t, reps = layouts[-1]
        used = total / t
        if ctx.targets:
            why = f"cut: no memory bandwidth / peak FLOPs in the catalog for {acc.model}, cannot check the target"
            return Option(it, n, False, why, used, usable, cost, dated_price=dated)
        reason = budget_cut(cost, n, ctx.budget) or "; ".join(
            [
                f"fits: {fmt_gib(used)}/{fmt_gib(usable)} GiB per device, TP{t}; throughput unknown (no "
                f"memory bandwidth / peak FLOPs for {acc.model})",
                *extra,
            ]
        )
        return Option(
            it, n, not reason.startswith("cut:"), reason, used, usable, cost, dated_price=dated, replicas=reps
        )
    scored: list[tuple[float, int, int, int, ServingEstimate, str | None]] = []
    for n, t, reps in layouts:
        est = estimate_serving(
            params=ctx.params,
            weight_bytes=ctx.wbytes,
            kv_token_bytes=ctx.kv_token,
            precision=ctx.precision,
            context=ctx.context,
            output_tokens=ctx.output_tokens,
            concurrency=ctx.concurrency,
            devices=t,
            hardware=hw,
        )
        scored.append((est.output_tokens_per_s * reps, n, t, reps, est, _misses(est, ctx.ttft_ms, ctx.tpot_ms)))
    meeting = [s for s in scored if s[5] is None]
    if not meeting:
        best = min(scored, key=lambda s: (s[4].tpot_s, s[4].ttft_s))
        _, n, t, reps, est, miss = best
        return Option(
            it,
            n,
            False,
            f"cut: misses the latency target at every TP degree; fastest TP{t}: {miss}",
            total / t,
            usable,
            cost,
            dated_price=dated,
            serving=est,
            replicas=reps,
        )
    rate, n, t, reps, est, _ = max(meeting, key=lambda s: s[0])
    others = [
        f"TP{s[2]} TPOT {s[4].tpot_s * 1e3:,.1f} ms" + ("" if s[5] is None else " (misses target)")
        for s in scored
        if s[2] != t
    ]
    parts = [
        f"fits: {fmt_gib(total / t)}/{fmt_gib(usable)} GiB per device, TP{t} x {reps} replica(s)"
        + (f" over {t} devices" if n > 1 else ""),
        f"{est.bound}-bound decode, {rate:,.0f} output tok/s",
    ]
    if others:
        parts.append("other TP (same tok/s per node when memory-bound): " + ", ".join(others))
    reason_cut = budget_cut(cost, n, ctx.budget)
    return Option(
        it,
        n,
        reason_cut is None,
        reason_cut or "; ".join(parts + extra),
        total / t,
        usable,
        cost,
        dated_price=dated,
        serving=est,
        replicas=reps,
    )


def _rank(options: list[Option]) -> tuple[Option, ...]:
    def key(o: Option) -> tuple[int, float, int, float, int, float, int, float]:
        per_m = o.usd_per_million_output_tokens
        rate = o.output_tokens_per_s
        fill = (o.used_bytes_per_device or 0.0) / (o.usable_bytes_per_device or 1.0)
        return (
            0 if per_m is not None else 1,
            per_m or 0.0,
            0 if rate is not None else 1,
            -(rate or 0.0),  # unpriced: the most tokens/s first
            0 if o.price_per_hour is not None else 1,
            o.price_per_hour or 0.0,
            o.nodes,
            fill,
        )

    chosen = sorted((o for o in options if o.chosen), key=key)
    cut = sorted((o for o in options if not o.chosen), key=lambda o: o.instance.name)
    return tuple(chosen + cut)


def advise_infer(
    params: float,
    *,
    precision: str = "bf16",
    context: int = 4096,
    output_tokens: int = 256,
    concurrency: int = 1,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    max_nodes: int = 4,
    budget_per_hour: float | None = None,
    headroom: float = 0.15,
    cpu_max_params: float = 3e9,
    shape: ModelShape | None = None,
) -> Advice:
    """Rank instance type x TP degree x node count for serving `concurrency` sequences per replica of `context`
    prompt tokens and `output_tokens` generated tokens (weights at `precision`, bf16 KV cache)."""
    check_common(params, max_nodes, budget_per_hour, headroom)
    wbytes = precision_bytes(precision)
    _check_int("--context", context, 10_000_000)
    _check_int("--output-tokens", output_tokens, 1_000_000)
    _check_int("--concurrency", concurrency, 100_000)
    _check_target("--ttft-ms", ttft_ms)
    _check_target("--tpot-ms", tpot_ms)
    shape = shape or shape_for_params(params)
    need = inference_memory(
        params,
        precision=precision,
        layers=shape.layers,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        context=context + output_tokens,
        batch=concurrency,
    )
    ctx = _Ctx(
        params=params,
        precision=precision.lower(),
        wbytes=wbytes,
        kv_token=kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2.0),
        context=context,
        output_tokens=output_tokens,
        concurrency=concurrency,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        budget=budget_per_hour,
        headroom=headroom,
        max_nodes=max_nodes,
    )
    total = need.total_bytes
    options: list[Option] = []
    for it in all_instances():
        if it.accelerator is None:
            options.append(_cpu_option(it, params, total, cpu_max_params, ctx))
        else:
            options.append(_accelerator_option(it, total, shape, ctx))
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
                serving=o.serving,
            )
            for o in options
        ]
    gpu, neuron = efficiency_for("nvidia-gpu"), efficiency_for("neuron")
    assumptions = (
        f"weights {params:g} x {wbytes:g} B ({precision}) = {need.weights_bytes / GIB:.1f} GiB; KV cache bf16 "
        f"2 x {shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} x ({context} + {output_tokens}) "
        f"tokens x {concurrency} = {need.kv_cache_bytes / GIB:.1f} GiB per replica; shape {shape.describe()}",
        f"--concurrency {concurrency} sequences per replica (continuous batching); prefill 2 x params x context "
        "FLOPs; each decode step reads the weights + every sequence's KV cache over memory bandwidth, or is bound "
        "by 2 x params x concurrency FLOPs, whichever is slower; TTFT excludes queueing",
        f"efficiency (data/serving_efficiency.yaml): NVIDIA {gpu.bandwidth:.0%} of bandwidth, {gpu.compute:.0%} of "
        f"peak FLOPs; Neuron {neuron.bandwidth:.0%} / {neuron.compute:.1%}; checked against published benchmarks "
        "within +/-30% (tests/catalog/test_serving_benchmarks.py)",
        f"activations and runtime buffers are covered by the {headroom:.0%} headroom; CPU hosts: host RAM less "
        f"{CPU_OS_RESERVE_GIB:g} GiB, models <= {cpu_max_params:g} params, no throughput estimate",
        "multi-node serving only when no single node fits",
        "prices: EC2 on-demand us-east-1, dated per row (data/training_prices.yaml); SageMaker hosting bills ml.* at "
        "its own rates; unknown prices are not estimated; $/1M output tokens = $/h / (tokens/s x 3600) x 1e6 at "
        "full load",
    )
    inputs: dict[str, object] = {
        "params": params,
        "precision": precision,
        "context": context,
        "output_tokens": output_tokens,
        "concurrency": concurrency,
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "max_nodes": max_nodes,
        "budget_per_hour": budget_per_hour,
        "headroom": headroom,
    }
    return Advice("infer", inputs, assumptions, _rank(options))
