"""The bench's pictures (matplotlib, Agg backend): the same inputs give byte-identical PNGs.

Determinism: no timestamps or version strings in the PNG (`metadata={"Software": None}`; matplotlib writes no
creation time into PNGs), a fixed size and dpi, and lines in the order the runs are given. The training curves are
deterministic themselves (fixed seeds, one thread per rank); timings are not, so the int8 chart changes with the
machine and its load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

PNG_METADATA: dict[str, str | None] = {"Software": None}
DPI = 110


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata=PNG_METADATA)
    plt.close(fig)
    return path


def _smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the first points average what there is)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def loss_curves(
    curves: dict[str, list[tuple[int, float]]],
    path: Path,
    *,
    floor: float | None = None,
    warmup: int | None = None,
    window: int = 20,
) -> Path:
    """Loss against step, one line per hook: curves maps a hook to (step, loss) points."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, points in curves.items():
        steps = [s for s, _ in points]
        ax.plot(steps, _smooth([v for _, v in points], window), label=name, linewidth=1.2)
    _finish(ax, floor, f"loss ({window}-step moving average)")
    if warmup:
        ax.axvline(warmup, color="grey", linewidth=0.8, linestyle=":", label="PowerSGD starts")
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax.set_title("Training loss per DDP communication hook (2 ranks, same data and seed)")
    return _save(fig, path)


def loss_vs_bytes(
    curves: dict[str, list[tuple[float, float]]], path: Path, *, floor: float | None = None, window: int = 20
) -> Path:
    """Loss against cumulative bytes one rank handed to all-reduce (log scale), one line per hook."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, points in curves.items():
        ax.plot([b for b, _ in points], _smooth([v for _, v in points], window), label=name, linewidth=1.2)
    ax.set_xscale("log")
    _finish(ax, floor, f"loss ({window}-step moving average)")
    ax.set_xlabel("cumulative bytes sent per rank")
    ax.legend(fontsize=8)
    ax.set_title("Loss against communication: further left is cheaper")
    return _save(fig, path)


def _finish(ax: Axes, floor: float | None, ylabel: str) -> None:
    if floor is not None:
        ax.axhline(floor, color="black", linewidth=0.8, linestyle="--", label=f"entropy floor {floor:.3f}")
        ax.set_ylim(floor - 0.05, floor + 1.2)
    ax.set_ylabel(ylabel)
    ax.grid(True, linewidth=0.3)


def int8_bars(rows: dict[str, dict[str, float]], path: Path, *, title: str) -> Path:
    """rows: model -> {"fp32 p50", "int8 p50", "fp32 p99", "int8 p99" (ms), "fp32 thr", "int8 thr" (samples/s)}."""
    models = list(rows)
    fig, (lat, thr) = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.2
    for k, (key, label) in enumerate(
        (("fp32 p50", "fp32 p50"), ("int8 p50", "int8 p50"), ("fp32 p99", "fp32 p99"), ("int8 p99", "int8 p99"))
    ):
        xs = [i + (k - 1.5) * width for i in range(len(models))]
        lat.bar(xs, [rows[m][key] for m in models], width, label=label)
    lat.set_yscale("log")
    lat.set_ylabel("batch-1 latency, CPU ms (log)")
    lat.set_xticks(range(len(models)), models, fontsize=8)
    lat.legend(fontsize=8)
    lat.grid(True, axis="y", linewidth=0.3)
    for k, key in enumerate(("fp32 thr", "int8 thr")):
        xs = [i + (k - 0.5) * 0.35 for i in range(len(models))]
        bars = thr.bar(xs, [rows[m][key] for m in models], 0.35, label=key.split()[0])
        if key == "int8 thr":
            for bar, m in zip(bars, models, strict=True):
                speedup = rows[m]["int8 thr"] / rows[m]["fp32 thr"]
                thr.annotate(f"{speedup:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                             ha="center", va="bottom", fontsize=8)  # fmt: skip
    thr.set_yscale("log")
    thr.set_ylabel("batch-64 throughput, samples per CPU s (log)")
    thr.set_xticks(range(len(models)), models, fontsize=8)
    thr.legend(fontsize=8)
    thr.grid(True, axis="y", linewidth=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
