"""`python -m runtime.workloads.bench [--out docs/bench]`: every table printed, every picture written."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov

from runtime.workloads.bench import openvino as ovb
from runtime.workloads.bench import plots, training
from runtime.workloads.bench.report import Clock, cpu_int8_instructions, has_vnni, table

DOCS = Path(__file__).resolve().parents[3] / "docs" / "bench"


def compression(tmp: Path, setup: training.Setup, out: Path, runner: training.Runner | None = None) -> str:
    extra = ("--lr-schedule", "cosine")
    kw = {"runner": runner} if runner else {}
    results, failed = training.run_all(tmp, setup.hooks(), setup, steps=setup.steps, extra=extra, **kw)
    if "fp32 (none)" not in results:
        return "Gradient compression: the fp32 baseline failed" + "".join(f"\nFAILED {f}" for f in failed)
    summaries = training.summarize_hooks(results, setup)
    floor = training.lm_floor(setup)
    by_step = {n: [(r["step"], r["loss"]) for r in run.records] for n, run in results.items()}
    by_bytes = {}
    for name, run in results.items():
        total, points = 0.0, []
        for r in run.records:
            total += r["comm_bytes"]
            points.append((total, r["loss"]))
        by_bytes[name] = points
    plots.loss_curves(by_step, out / "loss-vs-step.png", floor=floor, warmup=setup.start)
    plots.loss_vs_bytes(by_bytes, out / "loss-vs-bytes.png", floor=floor)
    return training.hooks_table(summaries, setup, failed)


def strategies(tmp: Path, setup: training.Setup) -> str:
    results, failed = training.run_all(tmp, setup.strategies(), setup, steps=setup.strategy_steps)
    return training.strategies_table(results, setup, failed)


def int8(out: Path, *, seq: int, calibration: int, seconds: float) -> str:
    model, flags = cpu_int8_instructions()
    rng = np.random.default_rng(1)
    rows, chart = [], {}
    mlp = ovb.mlp_models()
    enc = ovb.encoder_models(ovb.BERT_BASE, seq, calibration)
    cases: list[tuple[str, tuple[ov.Model, ov.Model], np.ndarray, np.ndarray, int]] = [
        ("MLP 1024-4096x3-1000", mlp, rng.standard_normal((1, 1024), dtype=np.float32),
         rng.standard_normal((64, 1024), dtype=np.float32), 3),
        (f"BERT-base encoder, seq {seq}", enc, rng.integers(0, ovb.BERT_BASE.vocab, (1, seq), dtype=np.int64),
         rng.integers(0, ovb.BERT_BASE.vocab, (64, seq), dtype=np.int64), 2),
    ]  # fmt: skip
    for name, (fp32, q), one, batch, batch_runs in cases:
        assert ovb.is_int8(q), f"{name}: NNCF left no FakeQuantize in the int8 model"
        t = {p: ovb.measure(m, one, batch, seconds=seconds, latency_runs=30, batch_runs=batch_runs)
             for p, m in (("fp32", fp32), ("int8", q))}  # fmt: skip
        for p in ("fp32", "int8"):
            rows.append([
                name, p, f"{t[p].p50_ms:.2f}", f"{t[p].p99_ms:.2f}", str(t[p].latency_runs), f"{t[p].per_s:,.1f}",
                str(t[p].throughput_runs), f"{t[p].per_s / t['fp32'].per_s:.2f}x",
                f"{t[p].wall_p50_ms:.2f} / {t[p].wall_p99_ms:.2f} / {t[p].wall_per_s:,.1f}",
            ])  # fmt: skip
        chart[name] = {
            "fp32 p50": t["fp32"].p50_ms, "int8 p50": t["int8"].p50_ms, "fp32 p99": t["fp32"].p99_ms,
            "int8 p99": t["int8"].p99_ms, "fp32 thr": t["fp32"].per_s, "int8 thr": t["int8"].per_s,
        }  # fmt: skip
    vnni = "has VNNI" if has_vnni(flags) else "NO VNNI: int8 runs on multiply-add sequences, expect a smaller gain"
    title = (
        f"OpenVINO on {model}, 1 inference thread, CPU time; int8 instructions: {', '.join(flags) or 'none'} ({vnni})"
    )
    plots.int8_bars(chart, out / "int8-vs-fp32.png", title=title)
    headers = [
        "model", "precision", "p50 ms (b=1)", "p99 ms", "runs", "samples/s (b=64)", "runs", "vs fp32",
        "wall p50 / p99 / samples/s",
    ]  # fmt: skip
    note = "Latency and throughput in CPU time of the one inference thread (the machine is shared); wall clock last."
    return f"{title}\n{note}\n{table(headers, rows)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=DOCS, help="where the PNGs go")
    p.add_argument("--encoder-seq", type=int, default=128, help="the encoder's sequence length")
    p.add_argument("--only", choices=("compression", "strategies", "openvino"), help="run one part")
    args = p.parse_args(argv)
    setup = training.Setup()
    clocks = []
    start = Clock.now()
    model, flags = cpu_int8_instructions()
    print(f"CPU: {model}; int8 instructions: {', '.join(flags) or 'none'}; VNNI: {has_vnni(flags)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        steps: list[tuple[str, Callable[[], str]]] = [
            ("compression", lambda: compression(Path(tmp), setup, args.out)),
            ("strategies", lambda: strategies(Path(tmp), setup)),
            ("openvino", lambda: int8(args.out, seq=args.encoder_seq, calibration=8, seconds=2.0)),
        ]
        for name, step in steps:
            if args.only and name != args.only:
                continue
            t0 = Clock.now()
            print(f"\n{step()}", flush=True)
            clocks.append((name, Clock.now().since(t0)))
    total = Clock.now().since(start)
    parts = ", ".join(f"{n} {c.wall:.0f} s wall / {c.cpu:.0f} s CPU" for n, c in clocks)
    print(f"\nbench: {total.wall:.0f} s wall, {total.cpu:.0f} s CPU (user+sys, all processes); {parts}")
    print(f"pictures: {', '.join(sorted(str(f) for f in args.out.glob('*.png')))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
