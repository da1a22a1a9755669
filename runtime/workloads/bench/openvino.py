"""OpenVINO fp32 vs NNCF int8 on this CPU: a compute-bound MLP and an encoder with BERT-base's shapes.

Random weights: throughput and latency do not depend on their values (the accuracy gate stays on the trained
digits model, workload_tests/test_serve.py). One inference thread, and `INFERENCE_PRECISION_HINT=f32` so the fp32
baseline really runs in fp32 (OpenVINO may pick bf16 on CPUs that have it). The encoder is BERT-base's
(Devlin et al., 2019): 12 post-norm layers, hidden 768, 12 heads, feed-forward 3072, GELU, a 30,522-token
vocabulary, a tanh pooler and a 2-class head; quantized with NNCF's transformer preset (`ModelType.TRANSFORMER`,
which keeps the softmax and layer-norm inputs in float).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import nncf
import numpy as np
import openvino as ov
import torch
from torch import nn

from runtime.workloads.serve import convert

CONFIG = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}


@dataclass(frozen=True)
class EncoderShape:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    vocab: int = 30522
    max_positions: int = 512

    def params(self) -> int:
        per_layer = 4 * self.hidden * self.hidden + 2 * self.hidden * self.ffn
        return self.layers * per_layer + (self.vocab + self.max_positions) * self.hidden


BERT_BASE = EncoderShape()


class EncoderLayer(nn.Module):
    def __init__(self, s: EncoderShape) -> None:
        super().__init__()
        self.heads = s.heads
        self.qkv = nn.Linear(s.hidden, 3 * s.hidden)
        self.out = nn.Linear(s.hidden, s.hidden)
        self.norm1 = nn.LayerNorm(s.hidden)
        self.ff1 = nn.Linear(s.hidden, s.ffn)
        self.ff2 = nn.Linear(s.ffn, s.hidden)
        self.norm2 = nn.LayerNorm(s.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = self.norm1(x + self.out(a))
        return self.norm2(x + self.ff2(nn.functional.gelu(self.ff1(x))))  # type: ignore[no-any-return]


class Encoder(nn.Module):
    def __init__(self, s: EncoderShape, classes: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.hidden)
        self.pos = nn.Embedding(s.max_positions, s.hidden)
        self.norm = nn.LayerNorm(s.hidden)
        self.layers = nn.Sequential(*(EncoderLayer(s) for _ in range(s.layers)))
        self.pooler = nn.Linear(s.hidden, s.hidden)
        self.head = nn.Linear(s.hidden, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embed(tokens) + self.pos(torch.arange(tokens.shape[1])))
        x = self.layers(x)
        return self.head(torch.tanh(self.pooler(x[:, 0])))  # type: ignore[no-any-return]


def encoder_models(shape: EncoderShape, seq: int, calibration: int, seed: int = 0) -> tuple[ov.Model, ov.Model]:
    """(fp32, int8) OpenVINO models of a random-weight encoder, int8 calibrated on `calibration` random inputs."""
    torch.manual_seed(seed)
    model = Encoder(shape).eval()
    with torch.no_grad():
        fp32 = ov.convert_model(
            model, example_input=torch.zeros(1, seq, dtype=torch.int64), input=[ov.PartialShape([-1, seq])]
        )
    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, shape.vocab, (1, seq), dtype=np.int64) for _ in range(calibration)]
    int8 = nncf.quantize(fp32, nncf.Dataset(samples), subset_size=calibration, model_type=nncf.ModelType.TRANSFORMER)
    return fp32, int8


def mlp_models(features: int = 1024, hidden: int = 4096, layers: int = 3, seed: int = 0) -> tuple[ov.Model, ov.Model]:
    torch.manual_seed(seed)
    fp32 = convert.to_openvino(convert.mlp(features, hidden, 1000, layers=layers).eval(), features)
    calibration = np.random.default_rng(seed).standard_normal((300, features), dtype=np.float32)
    return fp32, convert.quantize_int8(fp32, calibration)


def _timeit(compiled: ov.CompiledModel, x: np.ndarray, seconds: float, min_runs: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per call. CPU is the process's CPU time: with one inference thread it is the compute the
    call took, whatever else the machine runs; wall time on a shared machine includes waiting for a core."""
    request = compiled.create_infer_request()
    request.infer([x])  # first call allocates
    times: list[tuple[float, float]] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < min_runs:
        t0, c0 = time.perf_counter(), time.process_time()
        request.infer([x])
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return times


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p99_ms: float
    """Batch-1 latency percentiles in CPU time (the wall-clock ones below)."""
    latency_runs: int
    per_s: float
    """Batch-64 samples per CPU second (median batch)."""
    throughput_runs: int
    wall_p50_ms: float
    wall_p99_ms: float
    wall_per_s: float


def measure(
    model: ov.Model, one: np.ndarray, batch: np.ndarray, *, seconds: float, latency_runs: int, batch_runs: int
) -> Timing:
    """Batch-1 latency for `seconds` (at least `latency_runs` calls), then at least `batch_runs` batch calls."""
    compiled = ov.Core().compile_model(model, "CPU", CONFIG)
    lat = _timeit(compiled, one, seconds, latency_runs)
    thr = _timeit(compiled, batch, seconds, batch_runs)
    cpu = [float(v) for v in np.percentile([c for _, c in lat], [50, 99]) * 1000]
    wall = [float(v) for v in np.percentile([w for w, _ in lat], [50, 99]) * 1000]
    per_s = len(batch) / statistics.median(c for _, c in thr)
    wall_per_s = len(batch) / statistics.median(w for w, _ in thr)
    return Timing(cpu[0], cpu[1], len(lat), per_s, len(thr), wall[0], wall[1], wall_per_s)


def is_int8(model: ov.Model) -> bool:
    """NNCF inserted quantize/dequantize pairs (FakeQuantize), which the CPU plugin runs as int8 kernels."""
    return any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
