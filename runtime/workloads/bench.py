"""`make bench-workloads`: gradient compression on the reference LM, and OpenVINO fp32 vs int8 serving.

One run per DDP hook with the same seed, data and steps (2 CPU processes over gloo): bytes handed to the
all-reduce per step after PowerSGD's warm-up steps (and over the whole run), median step time, final loss and the
mean loss of the last steps, each against uncompressed fp32 DDP. Then a compute-bound MLP (random weights;
throughput does not depend on their values) compiled by OpenVINO for this CPU in fp32 and NNCF int8: batch-1
latency and batch-64 throughput.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov

from runtime.workloads import launch
from runtime.workloads.serve import convert

STEPS = 240
START = 24
"""PowerSGD's warm-up: plain all-reduce for the first START steps (10%, torch's suggested starting point)."""
HOOKS = [
    ("none (fp32)", ["--hook", "none"]),
    ("fp16", ["--hook", "fp16"]),
    ("bf16", ["--hook", "bf16"]),
    ("powersgd r=4", ["--hook", "powersgd", "--powersgd-rank", "4", "--powersgd-start-iter", str(START)]),
    ("powersgd r=8", ["--hook", "powersgd", "--powersgd-rank", "8", "--powersgd-start-iter", str(START)]),
]
MODEL = ["--d-model", "128", "--layers", "2", "--seq-len", "64", "--batch-size", "8", "--lr", "2e-3"]
LAST = 10
"""The final loss is one batch's loss; the mean of the last LAST steps is the less noisy comparison."""


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def bench_training(tmp: Path) -> str:
    results = {}
    failed = []
    for name, args in HOOKS:
        try:
            path = tmp / f"{name.split()[0]}-{len(results) + len(failed)}.jsonl"
            recs = launch.torchrun(path, "--steps", str(STEPS), *MODEL, *args, timeout=600)
        except RuntimeError as err:  # a run that fails or hangs is reported, not hidden
            failed.append(f"{name}: {str(err).splitlines()[0][-200:]}")
            continue
        results[name] = (
            statistics.mean(r["comm_bytes"] for r in recs[START:]),  # every hook's steady state, after warm-up
            statistics.mean(r["comm_bytes"] for r in recs),
            statistics.median(r["step_time_s"] for r in recs[START:]),
            recs[-1]["loss"],
            statistics.mean(r["loss"] for r in recs[-LAST:]),
        )
    base_bytes, base_run, _, base_loss, base_last = results["none (fp32)"]
    rows = [
        [
            name,
            f"{b:,.0f}",
            f"{base_bytes / b:.1f}x",
            f"{base_run / run:.1f}x",
            f"{1000 * t:.1f}",
            f"{loss:.4f}",
            f"{100 * (loss - base_loss) / base_loss:+.2f}%",
            f"{100 * (last - base_last) / base_last:+.2f}%",
        ]
        for name, (b, run, t, loss, last) in results.items()
    ]
    head = (
        f"Gradient compression: TinyLM d=128, 2 layers, seq 64, batch 8/rank, AdamW lr 2e-3, 2 ranks gloo/CPU,"
        f" {STEPS} steps, seed 0; PowerSGD after {START} plain steps, error feedback + warm start"
    )
    headers = [
        "hook", "bytes/step/rank", "fewer bytes", "whole run", "step ms (median)", "final loss", "vs fp32",
        f"last-{LAST} mean vs fp32",
    ]  # fmt: skip
    table = _table(headers, rows)
    return f"{head}\n{table}" + "".join(f"\nFAILED {f}" for f in failed)


def _timeit(compiled: ov.CompiledModel, x: np.ndarray, seconds: float) -> list[float]:
    request = compiled.create_infer_request()
    request.infer([x])  # first call allocates
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        request.infer([x])
        times.append(time.perf_counter() - t0)
    return times


def bench_openvino(seconds: float = 3.0) -> str:
    rng = np.random.default_rng(0)
    features = 1024
    torch_model = convert.mlp(features, 4096, 1000, layers=3).eval()
    fp32 = convert.to_openvino(torch_model, features)
    int8 = convert.quantize_int8(fp32, rng.standard_normal((300, features), dtype=np.float32))
    core = ov.Core()
    cfg = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    rows = []
    base = 0.0
    for name, model in (("fp32", fp32), ("int8 (NNCF PTQ)", int8)):
        compiled = core.compile_model(model, "CPU", cfg)
        lat = _timeit(compiled, rng.standard_normal((1, features), dtype=np.float32), seconds)
        thr = _timeit(compiled, rng.standard_normal((64, features), dtype=np.float32), seconds)
        per_s = 64 / statistics.median(thr)
        base = base or per_s
        p50, p99 = np.percentile(lat, [50, 99]) * 1000
        rows.append([name, f"{p50:.3f}", f"{p99:.3f}", f"{per_s:,.0f}", f"{per_s / base:.2f}x"])
    head = (
        "OpenVINO on this CPU, 1 inference thread: MLP 1024-4096-4096-4096-1000 (~46 MFLOP/sample); "
        f"int8 instructions: {_int8_isa()}"
    )
    return f"{head}\n" + _table(["precision", "latency p50 ms (b=1)", "p99 ms", "samples/s (b=64)", "speed-up"], rows)


def _int8_isa() -> str:
    """The CPU's int8 dot-product extensions (Intel DL Boost = AVX-512 VNNI, AVX-VNNI; AMX): the int8 speed-up
    depends on them, so the table says which this machine has."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text(encoding="utf-8").split())
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    found = [f for f in ("avx512_vnni", "avx_vnni", "amx_int8", "avx512f") if f in flags]
    return ", ".join(found) if found else "none of avx512_vnni/avx_vnni/amx_int8/avx512f"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        print(bench_training(Path(tmp)), flush=True)
    print()
    print(bench_openvino())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
