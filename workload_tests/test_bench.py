"""`make bench-workloads` in miniature: the same code paths on tiny sizes (the full run is only the bench target)."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

os.environ.setdefault("DS_BUILD_OPS", "0")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from runtime.workloads import lm
from runtime.workloads.bench import openvino as ovb
from runtime.workloads.bench import plots, report, training
from runtime.workloads.bench.__main__ import compression

TINY = training.Setup(
    steps=10, d_model=32, seq_len=16, batch_size=2, warmup_share=0.2, powersgd_ranks=(1,), half_hooks=(),
    short_warmup=None, strategy_steps=3, zero_stages=(1, 3), timeout_s=240,
)  # fmt: skip


def _png_text_chunks(data: bytes) -> list[bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]
        if kind in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
            chunks.append(kind + body)
        pos += 12 + length
    return chunks


def _fake_torchrun(metrics: Path, args: list[str], timeout: float) -> list[dict[str, Any]]:
    """Records shaped like train.py's (launching it is test_train.py's job): PowerSGD sends 1/20 after its warm-up."""
    steps, start = int(args[args.index("--steps") + 1]), 0
    if "powersgd" in args:
        start = int(args[args.index("--powersgd-start-iter") + 1])
    return [
        {"step": i + 1, "loss": 1.4 + 4 / (i + 1) + (0.01 if start else 0), "step_time_s": 0.01,
         "comm_bytes": 1000 if i < start or not start else 50}
        for i in range(steps)
    ]  # fmt: skip


def test_compression_bench_tabulates_each_hook_and_draws_both_curves(tmp_path: Path) -> None:
    text = compression(tmp_path / "runs", TINY, tmp_path / "png", runner=_fake_torchrun)
    assert "FAILED" not in text, text
    assert "fp32 (none)" in text and "powersgd r=1" in text and "last-1 loss" in text
    assert "Highest compression within 2% of fp32: powersgd r=1, 20.0x fewer bytes per step" in text
    for name in ("loss-vs-step.png", "loss-vs-bytes.png"):
        data = (tmp_path / "png" / name).read_bytes()
        assert _png_text_chunks(data) == []  # no Software/time metadata: the committed PNGs diff only on change


def test_zero3_trains_on_the_reference_script_and_its_bytes_are_counted(tmp_path: Path) -> None:
    """DeepSpeed training on the reference script: it failed at the first backward (the byte counter read
    `all_reduce(tensor=...)` positionally) and then at the first step (`steps_per_print: 0`, a modulo by zero)."""
    zero3 = [s for s in TINY.strategies() if s[0] == "ZeRO-3"]
    results, failed = training.run_all(tmp_path, zero3, TINY, steps=TINY.strategy_steps)
    assert failed == []
    records = results["ZeRO-3"].records
    # Same weights, data and loss as DDP before the first update: the mean of both ranks' first-batch losses.
    torch.manual_seed(0)
    cfg = lm.LMConfig(d_model=TINY.d_model, layers=TINY.layers, seq_len=TINY.seq_len)
    model, table = lm.TinyLM(cfg), lm.transition_table(cfg, 0)
    with torch.no_grad():
        first = [lm.loss_fn(model, lm.batch(cfg, table, seed=0, step=0, rank=r, size=TINY.batch_size)) for r in (0, 1)]
    assert records[0]["loss"] == pytest.approx(float(sum(first)) / 2, abs=1e-5)
    # Sharded weights all-gathered once, gradients reduce-scattered: a ring sends one gradient's worth on 2 ranks.
    grads = 4 * TINY.params()
    assert all(r["comm_bytes"] > grads for r in records)
    assert records[-1]["comm_ring_bytes"] == pytest.approx(grads, rel=0.02)
    assert "ZeRO-3" in training.strategies_table(results, TINY, failed)


def _run(losses: list[float], sent: list[int]) -> training.Run:
    return training.Run([{"step": i + 1, "loss": v, "comm_bytes": b, "step_time_s": 0.01}
                         for i, (v, b) in enumerate(zip(losses, sent, strict=True))], 1.0)  # fmt: skip


def test_loss_gap_uses_the_last_steps_mean_and_the_best_hook_is_the_cheapest_within_two_percent() -> None:
    setup = training.Setup(steps=10, warmup_share=0.2, last_share=0.2)
    runs = {
        "fp32 (none)": _run([3, 2, 2, 2, 2, 2, 2, 2, 1.0, 1.0], [100] * 10),
        "a": _run([3, 2, 2, 2, 2, 2, 2, 2, 1.01, 1.01], [100, 100] + [10] * 8),  # +1%: 10x
        "b": _run([3, 2, 2, 2, 2, 2, 2, 2, 1.2, 0.9], [100, 100] + [5] * 8),  # +5% mean, though its last loss is lower
    }
    s = {x.name: x for x in training.summarize_hooks(runs, setup)}
    assert s["a"].gap == pytest.approx(0.01) and s["b"].gap == pytest.approx(0.05)
    assert (s["a"].bytes_per_step, s["a"].run_bytes) == (10, 280)
    best = training.best_within(list(s.values()))
    assert best is not None and best.name == "a"
    text = training.hooks_table(list(s.values()), setup, [])
    assert "Highest compression within 2% of fp32: a, 10.0x fewer bytes per step (3.6x over the whole run" in text


def test_plots_are_byte_identical_for_the_same_input(tmp_path: Path) -> None:
    curves = {
        "fp32": [(i, 3.0 / (i + 1) + 1.4) for i in range(50)],
        "psgd": [(i, 3.2 / (i + 1) + 1.4) for i in range(50)],
    }
    a = plots.loss_curves(curves, tmp_path / "a.png", floor=1.38, warmup=5).read_bytes()
    b = plots.loss_curves(curves, tmp_path / "b.png", floor=1.38, warmup=5).read_bytes()
    assert a == b and _png_text_chunks(a) == []
    bars = {"m": {"fp32 p50": 2, "int8 p50": 1, "fp32 p99": 3, "int8 p99": 1.5, "fp32 thr": 100, "int8 thr": 300}}
    c = plots.int8_bars(bars, tmp_path / "c.png", title="t").read_bytes()
    assert c == plots.int8_bars(bars, tmp_path / "d.png", title="t").read_bytes()


def test_encoder_converts_quantizes_to_int8_and_times_both() -> None:
    shape = ovb.EncoderShape(layers=1, hidden=32, heads=4, ffn=64, vocab=50, max_positions=16)
    fp32, int8 = ovb.encoder_models(shape, 8, calibration=2)
    assert not ovb.is_int8(fp32) and ovb.is_int8(int8)
    one, batch = np.zeros((1, 8), dtype=np.int64), np.ones((4, 8), dtype=np.int64)
    for model in (fp32, int8):
        t = ovb.measure(model, one, batch, seconds=0.0, latency_runs=3, batch_runs=1)
        assert t.latency_runs == 3 and t.throughput_runs == 1 and 0 < t.p50_ms <= t.p99_ms and t.per_s > 0


def test_bert_base_shape_has_bert_base_parameter_count() -> None:
    # BERT-base: 110M parameters (Devlin et al., 2019); without biases, norms, token types and the pooler, ~109M.
    assert 105e6 < ovb.BERT_BASE.params() < 111e6


def test_cpu_int8_instructions_are_read_from_cpuinfo() -> None:
    info = "model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f avx512_vnni\n"
    assert report.cpu_int8_instructions(info) == ("Some CPU", ["avx512_vnni", "avx512f", "avx2"])
    assert report.has_vnni(["avx512_vnni"]) and not report.has_vnni(["avx2", "avx512f"])
    json.dumps(report.cpu_int8_instructions())  # this machine's answer is printable
