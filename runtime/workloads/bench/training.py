"""Gradient compression to convergence, and DDP vs FSDP vs DeepSpeed ZeRO 1/2/3, on the reference LM.

Every run is train.py under torchrun (2 CPU processes over gloo) with the same seed, data and model. The
compression runs train until the cosine learning-rate schedule reaches 0, so every hook ends on its plateau and the
comparison is the mean loss of the last `last_share` of the steps against uncompressed fp32 DDP (one batch's loss
is noisy; the mean of the plateau is not). PowerSGD sends plain all-reduces for the first `warmup_share` of the run
(torch's documentation suggests starting at 10% of the steps), which also caps its whole-run saving at
1 / warmup_share. The strategy runs are short: bytes per step per rank and step time settle after 2 steps.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlstack.workloads.deepspeed_config import deepspeed_config
from runtime.workloads import launch, lm
from runtime.workloads.bench.report import Clock, table

Record = dict[str, Any]


@dataclass(frozen=True)
class Setup:
    steps: int = 600
    d_model: int = 128
    layers: int = 2
    seq_len: int = 64
    batch_size: int = 8
    lr: float = 2e-3
    warmup_share: float = 0.1
    last_share: float = 0.1
    powersgd_ranks: tuple[int, ...] = (1, 2, 4, 8)
    half_hooks: tuple[str, ...] = ("fp16", "bf16")
    short_warmup: tuple[int, float] | None = (1, 0.05)
    """(PowerSGD rank, warm-up share) of one more run: the whole-run saving is capped at 1 / warm-up share."""
    strategy_steps: int = 30
    zero_stages: tuple[int, ...] = (1, 2, 3)
    timeout_s: float = 900

    @property
    def start(self) -> int:
        return max(1, round(self.steps * self.warmup_share))

    @property
    def last(self) -> int:
        return max(1, round(self.steps * self.last_share))

    def model_args(self, steps: int) -> list[str]:
        return [
            "--steps", str(steps), "--d-model", str(self.d_model), "--layers", str(self.layers),
            "--seq-len", str(self.seq_len), "--batch-size", str(self.batch_size), "--lr", str(self.lr),
        ]  # fmt: skip

    def hooks(self) -> list[tuple[str, list[str]]]:
        out = [("fp32 (none)", ["--hook", "none"])] + [(h, ["--hook", h]) for h in self.half_hooks]
        for r in self.powersgd_ranks:
            psgd = ["--hook", "powersgd", "--powersgd-rank", str(r), "--powersgd-start-iter", str(self.start)]
            out.append((f"powersgd r={r}", psgd))
        if self.short_warmup:
            r, share = self.short_warmup
            start = str(max(1, round(self.steps * share)))
            psgd = ["--hook", "powersgd", "--powersgd-rank", str(r), "--powersgd-start-iter", start]
            out.append((f"powersgd r={r}, {100 * share:g}% warm-up", psgd))
        return out

    def strategies(self) -> list[tuple[str, list[str]]]:
        out = [("DDP", ["--strategy", "ddp", "--hook", "none"]), ("FSDP2 full shard", ["--strategy", "fsdp"])]
        for stage in self.zero_stages:
            config = deepspeed_config(
                zero_stage=stage, precision="fp32", micro_batch_per_gpu=self.batch_size, gradient_clipping=0.0
            )
            if stage == 3:
                # DeepSpeed keeps parameters under 100k elements whole on every rank by default
                # (stage3_param_persistence_threshold); here that is most of them: shard every one, like FSDP.
                config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
            out.append((f"ZeRO-{stage}", ["--strategy", "deepspeed", "--deepspeed-config", json.dumps(config)]))
        return out

    def params(self) -> int:
        cfg = lm.LMConfig(d_model=self.d_model, layers=self.layers, seq_len=self.seq_len)
        return sum(p.numel() for p in lm.TinyLM(cfg).parameters())


@dataclass(frozen=True)
class Run:
    records: list[Record]
    cpu_s: float


Runner = Callable[[Path, list[str], float], list[Record]]


def _torchrun(metrics: Path, args: list[str], timeout: float) -> list[Record]:
    return launch.torchrun(metrics, *args, timeout=timeout)


def run_all(
    tmp: Path,
    runs: list[tuple[str, list[str]]],
    setup: Setup,
    *,
    steps: int,
    extra: tuple[str, ...] = (),
    runner: Runner = _torchrun,
) -> tuple[dict[str, Run], list[str]]:
    """name -> Run for the runs that finished, and one line per run that failed or hung (reported, not hidden)."""
    results: dict[str, Run] = {}
    failed: list[str] = []
    tmp.mkdir(parents=True, exist_ok=True)
    for i, (name, args) in enumerate(runs):
        start = Clock.now()
        try:
            metrics = tmp / f"{steps}-steps-{i}.jsonl"
            records = runner(metrics, [*setup.model_args(steps), *extra, *args], setup.timeout_s)
        except RuntimeError as err:
            lines = str(err).splitlines()
            cause = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1])  # the rank's exception
            failed.append(f"{name}: {lines[0][-160:]} / {cause.strip()[-240:]}")
            continue
        results[name] = Run(records, Clock.now().since(start).cpu)
    return results, failed


@dataclass(frozen=True)
class HookSummary:
    name: str
    bytes_per_step: float
    """After the warm-up: every hook's steady state."""
    run_bytes: int
    step_ms: float
    final_loss: float
    last_mean: float
    gap: float
    """(last_mean - fp32's last_mean) / fp32's last_mean."""
    cpu_s: float


def summarize_hooks(results: dict[str, Run], setup: Setup, base: str = "fp32 (none)") -> list[HookSummary]:
    def last_mean(recs: list[Record]) -> float:
        return float(statistics.mean(r["loss"] for r in recs[-setup.last :]))

    ref = last_mean(results[base].records)
    out = []
    for name, run in results.items():
        recs = run.records
        mean = last_mean(recs)
        out.append(
            HookSummary(
                name=name,
                bytes_per_step=statistics.mean(r["comm_bytes"] for r in recs[setup.start :]),
                run_bytes=sum(r["comm_bytes"] for r in recs),
                step_ms=1000 * statistics.median(r["step_time_s"] for r in recs[setup.start :]),
                final_loss=recs[-1]["loss"],
                last_mean=mean,
                gap=(mean - ref) / ref,
                cpu_s=run.cpu_s,
            )
        )
    return out


def best_within(summaries: list[HookSummary], limit: float = 0.02) -> HookSummary | None:
    """The compressed hook with the fewest bytes per step whose plateau loss is within `limit` of fp32's."""
    ok = [s for s in summaries[1:] if s.gap <= limit]
    return min(ok, key=lambda s: s.bytes_per_step) if ok else None


def hooks_table(summaries: list[HookSummary], setup: Setup, failed: list[str]) -> str:
    if not summaries:
        return "Gradient compression: every run failed" + "".join(f"\nFAILED {f}" for f in failed)
    base = summaries[0]
    rows = [
        [
            s.name,
            f"{s.bytes_per_step:,.0f}",
            f"{base.bytes_per_step / s.bytes_per_step:.1f}x",
            f"{s.run_bytes / 1e6:,.1f}",
            f"{base.run_bytes / s.run_bytes:.1f}x",
            f"{s.step_ms:.1f}",
            f"{s.final_loss:.4f}",
            f"{s.last_mean:.4f}",
            f"{100 * s.gap:+.2f}%",
        ]
        for s in summaries
    ]
    head = (
        f"Gradient compression to convergence: TinyLM d={setup.d_model}, {setup.layers} layers, seq {setup.seq_len},"
        f" batch {setup.batch_size}/rank, AdamW lr {setup.lr:g} cosine to 0, 2 ranks gloo/CPU, {setup.steps} steps,"
        f" seed 0; PowerSGD after {setup.start} plain steps ({100 * setup.warmup_share:.0f}%), error feedback +"
        f" warm start; loss = mean of the last {setup.last} steps (chain entropy floor"
        f" {lm_floor(setup):.4f})"
    )
    headers = [
        "hook", "bytes/step/rank", "fewer", "run MB/rank", "fewer (run)", "step ms", "final loss",
        f"last-{setup.last} loss", "vs fp32",
    ]  # fmt: skip
    best = best_within(summaries)
    verdict = (
        f"Highest compression within 2% of fp32: {best.name}, {base.bytes_per_step / best.bytes_per_step:.1f}x fewer"
        f" bytes per step ({base.run_bytes / best.run_bytes:.1f}x over the whole run, warm-up included) at"
        f" {100 * best.gap:+.2f}% loss"
        if best
        else "No compressed hook within 2% of fp32's loss"
    )
    return f"{head}\n{table(headers, rows)}\n{verdict}" + "".join(f"\nFAILED {f}" for f in failed)


def lm_floor(setup: Setup) -> float:
    """The loss of a model that knows the chain: the mean entropy of each token's successor distribution."""
    cfg = lm.LMConfig(d_model=setup.d_model, layers=setup.layers, seq_len=setup.seq_len)
    total = 0.0
    for row in lm.transition_table(cfg, 0).tolist():
        counts = Counter(row)
        total -= sum(c / len(row) * math.log(c / len(row)) for c in counts.values())
    return total / cfg.vocab


def strategies_table(results: dict[str, Run], setup: Setup, failed: list[str]) -> str:
    full = 4 * setup.params()  # one fp32 copy of every gradient: what DDP all-reduces
    rows = []
    ddp = results["DDP"].records[-1]["loss"] if "DDP" in results else None
    for name, run in results.items():
        steady = run.records[2:] or run.records
        payload = statistics.median(r["comm_bytes"] or 0 for r in steady)
        ring = statistics.median(r.get("comm_ring_bytes") or 0 for r in steady)
        loss = run.records[-1]["loss"]
        rows.append(
            [
                name,
                f"{payload:,.0f}",
                f"{ring:,.0f}",
                f"{ring / full:.2f}x",
                f"{run.records[0]['comm_bytes'] or 0:,}",
                f"{1000 * statistics.median(r['step_time_s'] for r in steady):.1f}",
                f"{loss:.4f}" + (f" ({100 * (loss - ddp) / ddp:+.2f}%)" if ddp else ""),
                f"{run.cpu_s:.0f}",
            ]
        )
    head = (
        f"DDP vs FSDP vs DeepSpeed ZeRO: same model ({setup.params():,} parameters, {full:,} bytes of fp32"
        f" gradients), fp32, {setup.strategy_steps} steps, 2 ranks gloo/CPU; per rank and step (median from step 3):"
        " bytes handed to collectives (payload) and what a ring algorithm sends for them"
    )
    headers = [
        "strategy", "payload B/step", "ring B/step", "ring / grads", "step 1 payload", "step ms", "loss (vs DDP)",
        "run CPU s",
    ]  # fmt: skip
    if not rows:
        return f"{head}\nevery run failed" + "".join(f"\nFAILED {f}" for f in failed)
    return f"{head}\n{table(headers, rows)}" + "".join(f"\nFAILED {f}" for f in failed)
