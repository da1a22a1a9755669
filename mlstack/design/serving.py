"""LLM serving figures per instance: measured (a `mlstack serve-check` report) or estimated (the serving model).

No CDK import: `mlstack plan` and the EKS serving stack read the same numbers. The estimate is the one `mlstack
advise --task infer` ranks by (`mlstack.catalog.serving_model`): one replica per tensor-parallel group, every
degree that divides the instance's accelerators and the model's attention heads and fits in memory is tried, and
the degree with the most output tokens/s per instance wins (the advisor's rule). A serve-check report measures
one instance (run it against one server, not a load balancer over several); of its concurrency levels without
failures the one with the most output tokens/s is the instance's capacity at full load.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mlstack.catalog import get_instance
from mlstack.catalog.instances import InstanceType
from mlstack.catalog.memory import GIB, ModelShape, inference_memory, precision_bytes, shape_for_params
from mlstack.catalog.serving_model import ServingEstimate, estimate_serving, hardware_for, kv_bytes_per_token
from mlstack.errors import InputError

__all__ = [
    "HEADROOM",
    "ServingFigures",
    "Workload",
    "estimate_instance",
    "measured_figures",
    "replica_layout",
    "usd_per_million",
]

HEADROOM = 0.15
"""Fraction of each device's memory left for activations and runtime buffers (the advisor's default)."""


@dataclass(frozen=True)
class Workload:
    """What one request and one instance look like: prompt and output tokens, sequences decoded at once."""

    context_tokens: int = 4096
    output_tokens: int = 256
    concurrency: int = 8


@dataclass(frozen=True)
class ServingFigures:
    """Output tokens/s of one instance at full load, where the number comes from, and its latency."""

    source: Literal["estimate", "measured"]
    output_tokens_per_s: float
    detail: str
    """How it was reached (TP degree and replicas, or the report's file and concurrency level)."""
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def to_json(self, hourly: float | None) -> dict[str, object]:
        return {
            "source": self.source,
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 2),
            "tpot_ms": None if self.tpot_ms is None else round(self.tpot_ms, 2),
            "usd_per_million_output_tokens": usd_per_million(hourly, self.output_tokens_per_s),
            "detail": self.detail,
        }


def usd_per_million(hourly: float | None, tokens_per_s: float) -> float | None:
    """$ per million output tokens of an instance billed `hourly` producing `tokens_per_s` (None if unknown)."""
    if hourly is None or tokens_per_s <= 0:
        return None
    return round(hourly / (tokens_per_s * 3600) * 1e6, 4)


@dataclass(frozen=True)
class ReplicaLayout:
    """How one instance serves the model: `replicas` groups of `tensor_parallel` devices, and the estimate."""

    tensor_parallel: int
    replicas: int
    estimate: ServingEstimate | None
    need_bytes_per_device: float
    """Weights and the KV cache of `concurrency` sequences of context + output tokens, per device."""
    device_bytes: float


def serving_bytes(params: float, precision: str, workload: Workload, shape: ModelShape | None = None) -> float:
    """Weights and KV cache of `workload` (prompt + output tokens for each concurrent sequence), in bytes: what the
    instance's accelerators must hold between them."""
    shape = shape or shape_for_params(params)
    return inference_memory(
        params,
        precision=precision,
        layers=shape.layers,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        context=workload.context_tokens + workload.output_tokens,
        batch=workload.concurrency,
    ).total_bytes


def replica_layout(
    params: float,
    precision: str,
    instance: InstanceType,
    workload: Workload,
    shape: ModelShape | None = None,
    tensor_parallel: int | None = None,
) -> ReplicaLayout | None:
    """The best single-instance layout (most output tokens/s; without an estimate the smallest degree that fits),
    or None when the instance has no accelerator or the model fits at no degree. `tensor_parallel` tries that
    degree only."""
    acc = instance.accelerator
    if acc is None:
        return None
    shape = shape or shape_for_params(params)
    need = serving_bytes(params, precision, workload, shape)
    device = acc.memory_gib * GIB
    degrees = [
        t
        for t in range(1, acc.count + 1)
        if acc.count % t == 0
        and shape.heads % t == 0
        and need / t <= device * (1 - HEADROOM)
        and tensor_parallel in (None, t)
    ]
    if not degrees:
        return None
    hardware = hardware_for(instance)
    if hardware is None:
        t = degrees[0]
        return ReplicaLayout(t, acc.count // t, None, need / t, device)
    best: ReplicaLayout | None = None
    for t in degrees:
        est = estimate_serving(
            params=params,
            weight_bytes=precision_bytes(precision),
            kv_token_bytes=kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2.0),
            precision=precision.lower(),
            context=workload.context_tokens,
            output_tokens=workload.output_tokens,
            concurrency=workload.concurrency,
            devices=t,
            hardware=hardware,
        )
        layout = ReplicaLayout(t, acc.count // t, est, need / t, device)
        if best is None or est.output_tokens_per_s * layout.replicas > _rate(best) * (1 + 1e-9):
            best = layout
    return best


def _rate(layout: ReplicaLayout) -> float:
    return 0.0 if layout.estimate is None else layout.estimate.output_tokens_per_s * layout.replicas


def estimate_instance(
    parameters_billion: float,
    precision: str,
    instance_type: str,
    workload: Workload,
    tensor_parallel: int | None = None,
) -> ServingFigures | None:
    """The serving model's figures for `instance_type` (EC2 or `ml.` name) at its best tensor-parallel degree (or
    `tensor_parallel`), or None when it cannot say (CPU host, no bandwidth or FLOPs in the catalog, no fit)."""
    instance = get_instance(instance_type)
    layout = replica_layout(parameters_billion * 1e9, precision, instance, workload, tensor_parallel=tensor_parallel)
    if layout is None or layout.estimate is None:
        return None
    est = layout.estimate
    return ServingFigures(
        "estimate",
        est.output_tokens_per_s * layout.replicas,
        f"serving model: TP{layout.tensor_parallel} x {layout.replicas} replica(s), {workload.concurrency} sequences "
        f"each, {workload.context_tokens} prompt + {workload.output_tokens} output tokens, {est.bound}-bound decode",
        est.ttft_s * 1e3,
        est.tpot_s * 1e3,
    )


def measured_figures(path: Path) -> ServingFigures:
    """The capacity a `mlstack serve-check` report measured: its level with the most output tokens/s among those
    without failed requests. Raises InputError (one line) for a file that is not such a report."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"--serve-check {path}: cannot read it ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise InputError(f"--serve-check {path}: not JSON ({err.msg} at line {err.lineno})") from None
    levels = report.get("levels") if isinstance(report, dict) else None
    if not isinstance(levels, list) or not levels:
        raise InputError(f"--serve-check {path}: no 'levels' list; write the file with `mlstack serve-check URL`")
    clean = [
        lv
        for lv in levels
        if isinstance(lv, dict)
        and lv.get("failed") == 0
        and isinstance(lv.get("output_tokens_per_s"), int | float)
        and math.isfinite(lv["output_tokens_per_s"])
        and lv["output_tokens_per_s"] > 0
    ]
    if not clean:
        raise InputError(
            f"--serve-check {path}: no concurrency level finished without failed requests; fix the server and "
            "measure again"
        )
    best = max(clean, key=lambda lv: float(lv["output_tokens_per_s"]))
    return ServingFigures(
        "measured",
        float(best["output_tokens_per_s"]),
        f"serve-check {path.name}: concurrency {best.get('concurrency')}, model {report.get('model')}",
        _p50(best, "ttft_ms"),
        _p50(best, "tpot_ms"),
    )


def _p50(level: dict[str, object], key: str) -> float | None:
    values = level.get(key)
    value = values.get("p50") if isinstance(values, dict) else None
    return float(value) if isinstance(value, int | float) else None
