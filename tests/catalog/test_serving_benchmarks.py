"""The serving estimate against published serving benchmarks.

Two sets, never mixed:
- CALIBRATION: the rows of `data/serving_efficiency.yaml` (`calibration:`); the family factors are fitted to them
  (test_efficiencies_are_fitted_to_their_rows re-does the fit).
- CHECKS (below): published measurements the factors were NOT fitted to. The model must land within +/-30% of
  the published output throughput for at least 4 in 5 of them.

NVIDIA checks: NVIDIA NIM LLM benchmarking, "Performance" page (docs.nvidia.com/nim/benchmarking/llm/1.0.0/
performance, read 2026-12-01), Llama-3.3-70b-instruct NIM 1.8.0, 2x H100 80G, fp8, TP2, 5000 input / 500 output
tokens, Throughput (Tokens/s) at concurrency 1, 5, 25 and 50. (The calibration uses only the TTFT of the 500-input
table of the same page, not these rows.)
Neuron checks: aws-neuron/aws-neuron-sdk general/benchmarks/inf2/{latency,throughput}_data_LLM.csv (the "Inf2
Inference Performance" page, Transformers Neuron 2.13, 2023), inf2.48xlarge, FP16: opt-66b TP degree 24 (12 chips)
batch 1 (sequence length 2048), opt-30b TP 8 (4 chips) batch 256 and opt-66b TP 24 batch 256 (sequence length
128). Their "Latency P50" is the per-token latency of the static batch, so the published throughput compared is
batch x 1000 / latency.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mlstack.catalog.instances import catalog
from mlstack.catalog.serving_model import (
    CalibrationRow,
    Efficiency,
    ServingEstimate,
    ServingHardware,
    efficiency_for,
    estimate_serving,
    kv_bytes_per_token,
    serving_data,
)

WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
OPT = {"opt-30b": (29.97e9, 48, 56, 128), "opt-66b": (65.7e9, 64, 72, 128)}  # params, layers, heads (MHA), dim
LLAMA_70B = (70.6e9, 80, 8, 128)


def _hardware(accelerator: str, family: str) -> ServingHardware:
    m = catalog().accelerator_models[accelerator]
    assert m.memory_bandwidth_gbps is not None and m.peak_dense_bf16_tflops is not None
    bw = 1555.0 if accelerator == "A100" else m.memory_bandwidth_gbps  # the calibration row's A100 is the 40GB part
    return ServingHardware(family, bw, m.peak_dense_bf16_tflops, m.peak_dense_fp8_tflops)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Check:
    name: str
    family: str
    accelerator: str
    devices: int
    shape: tuple[float, int, int, int]
    precision: str
    context: int
    output_tokens: int
    concurrency: int
    published_tokens_per_s: float
    static_batch: bool = False
    """Neuron rows: a static batch, decode steps only (throughput = batch / step)."""


CHECKS = (
    *(
        Check(
            f"NIM 1.8.0 Llama-3.3-70B fp8 TP2 2xH100 5000/500 c={c}",
            "nvidia-gpu",
            "H100",
            2,
            LLAMA_70B,
            "fp8",
            5000,
            500,
            c,
            tput,
        )
        for c, tput in ((1, 51.67), (5, 218.48), (25, 623.4), (50, 814.37))
    ),
    Check(
        "Neuron 2.13 opt-66b TP24 inf2.48xlarge b1 (35.4 ms)",
        "neuron",
        "Inferentia2",
        12,
        OPT["opt-66b"],
        "fp16",
        1024,
        1024,
        1,
        1000 / 35.4,
        static_batch=True,
    ),
    Check(
        "Neuron 2.13 opt-30b TP8 inf2.48xlarge b256 (141.8 ms)",
        "neuron",
        "Inferentia2",
        4,
        OPT["opt-30b"],
        "fp16",
        64,
        64,
        256,
        256 * 1000 / 141.8,
        static_batch=True,
    ),
    Check(
        "Neuron 2.13 opt-66b TP24 inf2.48xlarge b256 (122.4 ms)",
        "neuron",
        "Inferentia2",
        12,
        OPT["opt-66b"],
        "fp16",
        64,
        64,
        256,
        256 * 1000 / 122.4,
        static_batch=True,
    ),
)


def _estimate(
    *,
    family: str,
    accelerator: str,
    devices: int,
    shape: tuple[float, int, int, int],
    precision: str,
    context: int,
    output_tokens: int,
    concurrency: int,
    efficiency: Efficiency | None = None,
) -> ServingEstimate:
    params, layers, kv_heads, head_dim = shape
    return estimate_serving(
        params=params,
        weight_bytes=WEIGHT_BYTES[precision],
        kv_token_bytes=kv_bytes_per_token(layers, kv_heads, head_dim, 2.0),
        precision=precision,
        context=context,
        output_tokens=output_tokens,
        concurrency=concurrency,
        devices=devices,
        hardware=_hardware(accelerator, family),
        efficiency=efficiency,
    )


def predicted_tokens_per_s(check: Check) -> float:
    est = _estimate(
        family=check.family,
        accelerator=check.accelerator,
        devices=check.devices,
        shape=check.shape,
        precision=check.precision,
        context=check.context,
        output_tokens=check.output_tokens,
        concurrency=check.concurrency,
    )
    return check.concurrency / est.step_s if check.static_batch else est.output_tokens_per_s


def test_checks_are_not_calibration_rows() -> None:
    calibration = serving_data().calibration
    for check in CHECKS:
        for row in calibration:
            same_run = (row.accelerator, row.devices, row.params, row.context, row.concurrency) == (
                check.accelerator,
                check.devices,
                check.shape[0],
                check.context,
                check.concurrency,
            )
            assert not same_run, f"{check.name} is calibration row {row.id}"


def test_model_within_30_percent_of_published_benchmarks_not_calibrated_on() -> None:
    results = [(c.name, predicted_tokens_per_s(c), c.published_tokens_per_s) for c in CHECKS]
    table = "\n".join(f"{n}: model {p:,.1f} vs published {m:,.1f} tok/s ({p / m - 1:+.0%})" for n, p, m in results)
    within = [abs(p / m - 1) <= 0.30 for _, p, m in results]
    assert len(CHECKS) >= 5
    assert sum(within) / len(within) >= 0.8, table
    # both accelerator families are checked, and both pass on their own
    for family in ("nvidia-gpu", "neuron"):
        mine = [ok for c, ok in zip(CHECKS, within, strict=True) if c.family == family]
        assert mine and sum(mine) / len(mine) >= 0.8, table


def _measured_by_model(row: CalibrationRow, eff: Efficiency) -> float:
    est = _estimate(
        family=row.family,
        accelerator=row.accelerator,
        devices=row.devices,
        shape=(row.params, row.layers, row.kv_heads, row.head_dim),
        precision=row.precision,
        context=row.context,
        output_tokens=row.output_tokens,
        concurrency=row.concurrency,
        efficiency=eff,
    )
    if row.metric == "step_ms":
        return est.step_s * 1e3
    if row.metric == "ttft_ms":
        return est.ttft_s * 1e3
    if row.metric == "batch_latency_ms":
        return (row.concurrency * est.prefill_s + row.output_tokens * est.step_s) * 1e3
    return est.output_tokens_per_s


def _fit(row: CalibrationRow, fixed: Efficiency) -> float:
    """The factor (bandwidth or compute, per row.fits) at which the model reproduces the row exactly."""
    lo, hi = 0.001, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        eff = fixed.model_copy(update={row.fits: mid})
        value = _measured_by_model(row, eff)
        faster = value > row.measured if row.metric == "output_tokens_per_s" else value < row.measured
        lo, hi = (lo, mid) if faster else (mid, hi)
    return (lo + hi) / 2


@pytest.mark.parametrize("family", ["nvidia-gpu", "neuron"])
def test_efficiencies_are_fitted_to_their_rows(family: str) -> None:
    eff = efficiency_for(family)  # type: ignore[arg-type]
    rows = [r for r in serving_data().calibration if r.id in eff.calibrated_on]
    assert {r.family for r in rows} == {family}
    for kind in ("bandwidth", "compute"):
        fitted = [_fit(r, eff) for r in rows if r.fits == kind]
        assert fitted, f"{family}: no {kind} calibration row"
        mean = sum(fitted) / len(fitted)
        stated = getattr(eff, kind)
        assert stated == pytest.approx(mean, abs=0.006 if stated >= 0.2 else 0.0006), (kind, fitted)
