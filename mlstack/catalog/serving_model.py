"""Serving estimate for a decoder LLM on one model replica (tensor parallel over `devices` accelerators).

Roofline per step, with an efficiency factor per accelerator family (`data/serving_efficiency.yaml`, calibrated
on published serving benchmarks named there):

- prefill of one sequence: 2 x params x context FLOPs over the replica's devices at peak x compute efficiency;
- one decode step (every running sequence emits one token): it reads the weights once and the KV cache of every
  running sequence (at the mean length context + output/2), over memory bandwidth x bandwidth efficiency, and
  does 2 x params x concurrency FLOPs at peak x compute efficiency; the slower of the two bounds the step;
- continuous batching at a steady `concurrency`: each request's decode is interleaved with the prefills of the
  others, so TPOT = step + (concurrency - 1) x prefill / output tokens; TTFT = prefill + one step (no queueing);
  output tokens/s of the replica = concurrency x output / (concurrency x prefill + output x step).

FP8 weights compute at the accelerator's dense FP8 rate where it has one; int8/int4 are treated as weight-only
quantization (16-bit compute). Attention FLOPs and inter-node communication are not modelled separately: the
calibrated efficiencies absorb what the benchmarks contained (single-node tensor parallel over NVLink/NeuronLink).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlstack import resources, yamlload
from mlstack.catalog.instances import InstanceType, catalog
from mlstack.errors import CatalogError

__all__ = [
    "Efficiency",
    "ServingEstimate",
    "ServingHardware",
    "efficiency_for",
    "estimate_serving",
    "hardware_for",
    "serving_data",
]

Family = Literal["nvidia-gpu", "neuron"]
Bound = Literal["memory", "compute"]
DATA_FILE = "serving_efficiency.yaml"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Efficiency(BaseModel):
    """Achieved fraction of peak memory bandwidth (decode) and of peak dense FLOPs, for one accelerator family."""

    model_config = _FROZEN

    bandwidth: float = Field(gt=0, le=1)
    compute: float = Field(gt=0, le=1)
    calibrated_on: tuple[str, ...] = Field(min_length=1)
    """Ids of the `calibration` rows the two factors were fitted to (never re-used as checks)."""
    note: str = Field(min_length=1)


class CalibrationRow(BaseModel):
    """One published measurement the efficiencies are fitted to (see the file header for the fitting rule)."""

    model_config = _FROZEN

    id: str = Field(min_length=1)
    family: Family
    fits: Literal["bandwidth", "compute"]
    source: str = Field(min_length=10)
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$|^undated$")
    read: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    accelerator: str
    devices: int = Field(gt=0)
    params: float = Field(gt=0)
    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    precision: Literal["bf16", "fp16", "fp8"]
    context: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    concurrency: int = Field(gt=0)
    metric: Literal["step_ms", "ttft_ms", "batch_latency_ms", "output_tokens_per_s"]
    """step_ms: per-token latency of a static batch (one decode step); ttft_ms: time to first token;
    batch_latency_ms: a static batch of `concurrency` requests end to end (all prefills, then every decode step);
    output_tokens_per_s: a serving run at a steady `concurrency`."""
    measured: float = Field(gt=0)


class _ServingFile(BaseModel):
    model_config = _FROZEN

    reviewed: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    families: dict[Family, Efficiency]
    calibration: tuple[CalibrationRow, ...]


@functools.cache
def serving_data() -> _ServingFile:
    try:
        parsed = _ServingFile.model_validate(yamlload.safe_load(resources.catalog_text(DATA_FILE)))
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"serving efficiency file is invalid: {err}".replace("\n", " | ")) from err
    ids = {r.id for r in parsed.calibration}
    for fam, eff in parsed.families.items():
        missing = [i for i in eff.calibrated_on if i not in ids]
        if missing:
            raise CatalogError(f"serving efficiency file is invalid: {fam} names unknown calibration rows {missing}")
    return parsed


def efficiency_for(family: Family) -> Efficiency:
    return serving_data().families[family]


@dataclass(frozen=True)
class ServingHardware:
    """What the estimate needs from one accelerator device."""

    family: Family
    bandwidth_gbps: float
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None

    def peak_tflops(self, precision: str) -> float:
        return (self.peak_fp8_tflops or self.peak_bf16_tflops) if precision == "fp8" else self.peak_bf16_tflops


def hardware_for(it: InstanceType) -> ServingHardware | None:
    """The serving facts of `it`'s accelerator, or None (CPU host, or a figure the catalog lacks)."""
    acc = it.accelerator
    if acc is None:
        return None
    cat = catalog()
    bw, peak = cat.memory_bandwidth_gbps(it), cat.peak_tflops(it)
    if bw is None or peak is None:
        return None
    family: Family = "nvidia-gpu" if acc.kind == "gpu" else "neuron"
    return ServingHardware(family, bw, peak, cat.peak_fp8_tflops(it))


@dataclass(frozen=True)
class ServingEstimate:
    """One replica's estimate at a steady concurrency."""

    tensor_parallel: int
    prefill_s: float
    step_s: float
    bound: Bound
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    """Of one replica (all its concurrent sequences together)."""

    def to_json(self) -> dict[str, object]:
        return {
            "tensor_parallel": self.tensor_parallel,
            "prefill_ms": self.prefill_s * 1e3,
            "decode_step_ms": self.step_s * 1e3,
            "decode_bound": self.bound,
            "ttft_ms": self.ttft_s * 1e3,
            "tpot_ms": self.tpot_s * 1e3,
            "replica_output_tokens_per_s": self.output_tokens_per_s,
        }


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element: float) -> float:
    """K and V of every layer for one token."""
    return 2.0 * layers * kv_heads * head_dim * bytes_per_element


def estimate_serving(
    *,
    params: float,
    weight_bytes: float,
    kv_token_bytes: float,
    precision: str,
    context: int,
    output_tokens: int,
    concurrency: int,
    devices: int,
    hardware: ServingHardware,
    efficiency: Efficiency | None = None,
) -> ServingEstimate:
    """Estimate one replica of `devices` accelerators (see the module doc for each formula)."""
    eff = efficiency or efficiency_for(hardware.family)
    flops_rate = devices * hardware.peak_tflops(precision) * 1e12 * eff.compute
    bytes_rate = devices * hardware.bandwidth_gbps * 1e9 * eff.bandwidth
    prefill = 2.0 * params * context / flops_rate
    read = params * weight_bytes + kv_token_bytes * (context + output_tokens / 2) * concurrency
    t_mem = read / bytes_rate
    t_flops = 2.0 * params * concurrency / flops_rate
    step = max(t_mem, t_flops)
    tpot = step + (concurrency - 1) * prefill / output_tokens
    rate = concurrency * output_tokens / (concurrency * prefill + output_tokens * step)
    return ServingEstimate(
        tensor_parallel=devices,
        prefill_s=prefill,
        step_s=step,
        bound="memory" if t_mem >= t_flops else "compute",
        ttft_s=prefill + step,
        tpot_s=tpot,
        output_tokens_per_s=rate,
    )
