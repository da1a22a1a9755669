"""`mlstack advise`: the top options as a table (time, cost, layout, main assumption), then the reasons, the
published runs behind the time estimate, and the dated prices behind the cost. `--json` prints `Advice.to_json()`.

Plain text only (aligned columns, no colours): the same bytes on a terminal, in a pipe or in a CI log.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable

from mlstack.catalog.advisor import Advice, Option, advise_infer, advise_train
from mlstack.catalog.cli_common import integer, money, number, print_json, shape_from_args
from mlstack.catalog.instances import catalog
from mlstack.catalog.memory import BYTES_PER_PARAM, GIB
from mlstack.catalog.prices import MAX_PRICE_AGE_DAYS, SERVICES, stale
from mlstack.catalog.train_advisor import DEFAULT_TRAIN_MAX_NODES
from mlstack.console import render_table
from mlstack.errors import InputError

__all__ = ["register_advise", "render_advice"]


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 48:
        return f"{value / 24:,.0f} d"
    return f"{value:.1f} h"


def _time(o: Option) -> str:
    """The point estimate and its range, in the unit of the point: '30 d (23-39)'."""
    rng = o.est_hours_range
    if o.est_hours is None or rng is None:
        return "-"
    div, unit = (24, "d") if o.est_hours >= 48 else (1, "h")
    if unit == "d":
        return f"{o.est_hours / div:,.0f} d ({rng[0] / div:,.0f}-{rng[1] / div:,.0f})"
    return f"{o.est_hours:.1f} h ({rng[0]:.1f}-{rng[1]:.1f})"


def _target(o: Option) -> str:
    return {True: "met", False: "missed", None: "-"}[o.target_met]


def _serving_cells(o: Option) -> list[str]:
    """TP x replicas, tokens/s, TTFT, TPOT (infer only)."""
    s = o.serving
    if s is None:
        return ["-", "-", "-", "-"]
    return [
        f"TP{s.tensor_parallel} x{o.replicas}",
        f"{o.output_tokens_per_s or 0:,.0f}",
        f"{s.ttft_s * 1e3:,.0f}",
        f"{s.tpot_s * 1e3:,.1f}",
    ]


def _option_row(rank: str, o: Option, *, train: bool, target: bool = False) -> list[str]:
    used = "-" if o.used_bytes_per_device is None else f"{o.used_bytes_per_device / GIB:.1f}"
    usable = "-" if o.usable_bytes_per_device is None else f"{o.usable_bytes_per_device / GIB:.1f}"
    row = [rank, o.instance.name, str(o.nodes), o.describe_accelerators()]
    if train:
        row.append("-" if o.layout is None else o.layout.layout.describe())
    else:
        row += _serving_cells(o)
    row += [
        f"{used}/{usable}",
        f"{o.efa_gbps_per_node:g}" if o.efa_gbps_per_node else "no EFA",
        money(o.price_per_hour),
        "-" if o.dated_price is None else o.dated_price.date,
    ]
    if not train:
        per_m = o.usd_per_million_output_tokens
        row.insert(-2, "-" if per_m is None else f"{per_m:,.3f}")
    if train:
        row += [
            _time(o),
            *([_target(o)] if target else []),
            "-" if o.est_cost is None else f"{o.est_cost:,.0f}",
            "-" if o.utilisation is None else o.utilisation.label,
        ]
    return row


def _headers(train: bool, target: bool = False) -> tuple[list[str], list[int]]:
    headers = ["#", "instance", "nodes", "accelerators"]
    if train:
        headers.append("layout")
    else:
        headers += ["TP x replicas", "out tok/s", "TTFT ms", "TPOT ms"]
    headers += ["GiB/device used/usable", "EFA Gbps/node", "$/h (all nodes)"]
    if not train:
        headers.append("$/1M out tok")
    headers.append("price date")
    if train:
        headers += ["est. time (range)", *(["target"] if target else []), "est. $", "time assumption"]
    numeric = ("GiB/device used/usable", "EFA Gbps/node", "out tok/s", "TTFT ms", "TPOT ms", "$/1M out tok")
    right = [0, 2] + [i for i, h in enumerate(headers) if h in numeric]
    right += [i for i, h in enumerate(headers) if h in ("$/h (all nodes)", "est. time (range)", "est. $")]
    return headers, right


def _price_lines(advice: Advice, today: dt.date) -> list[str]:
    used = advice.prices_used()
    lines: list[str] = []
    if used:
        oldest = min(used, key=lambda p: p.date)
        old = sorted({p.instance for p in used if stale(p, today)})
        lines.append(f"prices: oldest price date used {oldest.date} ({oldest.instance}, {oldest.service})")
        if old:
            lines.append(f"  warning: prices older than {MAX_PRICE_AGE_DAYS} days: {', '.join(old)}")
        for src in sorted({p.source for p in used}):
            lines.append(f"  price source: {src}")
    unpriced = advice.unpriced()
    if unpriced:
        lines.append(f"no price known (not estimated): {', '.join(unpriced)}")
    return lines


def _utilisation_lines(chosen: tuple[Option, ...]) -> list[str]:
    seen: dict[tuple[str, str], list[str]] = {}
    for o in chosen:
        if o.utilisation is not None:
            seen.setdefault((o.utilisation.row.id, o.utilisation.note), []).append(o.instance.name)
    rows = {o.utilisation.row.id: o.utilisation.row for o in chosen if o.utilisation is not None}
    lines = [f"  {r.id}: {r.describe()}; {r.source} ({r.date})" for r in rows.values()]
    lines += [f"    {note}: {', '.join(names)}" for (_, note), names in seen.items()]
    return ["time from published runs:", *lines] if lines else []


def render_advice(advice: Advice, *, top: int, show_cut: bool, today: dt.date | None = None) -> str:
    train = advice.task == "train"
    days = advice.inputs.get("days") if train else None
    target = days is not None
    headers, right = _headers(train, target)
    lines = [f"mlstack advise --task {advice.task}  (catalog v{catalog().version}, reviewed {catalog().reviewed})"]
    lines += [f"  assumption: {a}" for a in advice.assumptions]
    lines.append("")
    chosen = advice.chosen[:top]
    if chosen:
        lines.append(
            render_table(
                headers,
                [_option_row(str(i), o, train=train, target=target) for i, o in enumerate(chosen, 1)],
                right=right,
            )
        )
        if len(advice.chosen) > top:
            lines.append(f"... {len(advice.chosen) - top} more options fit (--top N to show them)")
        lines.append("")
        lines.append("why:")
        for i, o in enumerate(chosen, 1):
            lines.append(f"  {i}. {o.instance.name} x{o.nodes}: {o.reason}")
            if o.target_note:
                lines.append(f"     {o.target_note}")
        lines.append("")
        lines += _utilisation_lines(chosen)
        lines += _price_lines(advice, today or dt.date.today())
    else:
        lines.append("no option fits: see the cut options below (raise --max-nodes or --budget-per-hour)")
    cut = advice.cut
    if show_cut or not chosen:
        lines.append("")
        lines.append(
            render_table(
                ["instance", "nodes", "reason"], [[o.instance.name, str(o.nodes), o.reason] for o in cut], right=[1]
            )
        )
    else:
        lines.append(f"{len(cut)} options cut (--all shows each with its reason)")
    return "\n".join(lines)


def _cmd_advise(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    shape = shape_from_args(args, args.params) if args.params > 0 else None
    if args.task == "train":
        for flag, value in (
            ("--context", args.context),
            ("--concurrency", args.concurrency),
            ("--output-tokens", args.output_tokens),
            ("--ttft-ms", args.ttft_ms),
            ("--tpot-ms", args.tpot_ms),
        ):
            if value is not None:
                raise InputError(f"{flag} applies to --task infer, not train")
        advice = advise_train(
            args.params,
            precision=args.precision,
            tokens=args.tokens,
            max_nodes=DEFAULT_TRAIN_MAX_NODES if args.max_nodes is None else args.max_nodes,
            target_days=args.days,
            budget_per_hour=args.budget_per_hour,
            zero_stage=args.zero,
            headroom=args.headroom,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            mfu=args.mfu,
            shape=shape,
            global_batch_tokens=args.global_batch_tokens,
            pricing=args.pricing,
        )
    else:
        for flag, value in (("--tokens", args.tokens), ("--days", args.days)):
            if value is not None:
                raise InputError(f"{flag} applies to --task train, not infer")
        advice = advise_infer(
            args.params,
            precision=args.precision,
            context=4096 if args.context is None else args.context,
            output_tokens=256 if args.output_tokens is None else args.output_tokens,
            concurrency=1 if args.concurrency is None else args.concurrency,
            ttft_ms=args.ttft_ms,
            tpot_ms=args.tpot_ms,
            max_nodes=4 if args.max_nodes is None else args.max_nodes,
            budget_per_hour=args.budget_per_hour,
            headroom=args.headroom,
            cpu_max_params=args.cpu_max_params,
            shape=shape,
        )
    if args.json:
        print_json(advice.to_json())
    else:
        print(render_advice(advice, top=args.top, show_cut=args.all))
    return 0


def register_advise(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    add_shape: Callable[[argparse.ArgumentParser], None],
) -> None:
    adv = subparsers.add_parser(
        "advise",
        help="rank instance type x node count for training or serving a model",
        description="Rank instance type x node count (x TP/PP/DP layout for training) for a task, keeping only "
        "options that fit with headroom.",
    )
    adv.add_argument("--task", choices=["train", "infer"], required=True)
    adv.add_argument("--params", type=number, required=True, help="parameter count, e.g. 70e9")
    adv.add_argument("--precision", default="bf16", choices=sorted(BYTES_PER_PARAM), help="default bf16")
    adv.add_argument("--tokens", type=number, help="train: token budget for a time/cost estimate")
    adv.add_argument(
        "--days",
        type=number,
        help="train: wall-clock target in days (needs --tokens). Each option adds data-parallel replicas (same "
        "TP x PP) until its estimated time meets it, or says in one line which limit stopped it. No default: a "
        "deadline is yours to set, and without one each option is the smallest node count that fits (what the model "
        "needs; the cost is nearly the same at any node count, only the time changes)",
    )
    adv.add_argument(
        "--max-nodes",
        type=integer,
        help=f"most nodes per option: train default {DEFAULT_TRAIN_MAX_NODES} (16,384 GPUs, the largest published "
        "single training job; set it to the capacity you can reserve), infer default 4",
    )
    adv.add_argument("--budget-per-hour", type=number, help="USD per hour for all nodes together")
    adv.add_argument("--zero", type=integer, default=1, help="train: ZeRO stage over DP, 0-3 (default 1)")
    adv.add_argument("--headroom", type=number, default=0.15, help="memory kept free, fraction (default 0.15)")
    adv.add_argument("--seq-len", type=integer, default=4096, help="train: sequence length (default 4096)")
    adv.add_argument("--micro-batch", type=integer, default=1, help="train: micro-batch per device (default 1)")
    adv.add_argument("--mfu", type=number, help="train: override the MFU of the nearest published run")
    adv.add_argument(
        "--global-batch-tokens", type=number, default=4 * 2**20, help="train: tokens per step (default 4Mi)"
    )
    adv.add_argument("--pricing", choices=SERVICES, default="ec2_on_demand", help="train: billing service")
    adv.add_argument("--context", type=integer, help="infer: context length in tokens (default 4096)")
    adv.add_argument("--concurrency", type=integer, help="infer: concurrent sequences per replica (default 1)")
    adv.add_argument("--output-tokens", type=integer, help="infer: generated tokens per request (default 256)")
    adv.add_argument("--ttft-ms", type=number, help="infer: time-to-first-token target; options that miss it are cut")
    adv.add_argument("--tpot-ms", type=number, help="infer: time-per-output-token target; options that miss it are cut")
    adv.add_argument("--cpu-max-params", type=number, default=3e9, help="infer: largest model for CPU hosts")
    adv.add_argument("--top", type=integer, default=10, help="chosen options to show (default 10)")
    adv.add_argument("--all", action="store_true", help="also list every cut option with its reason")
    adv.add_argument("--json", action="store_true", help="machine-readable output")
    add_shape(adv)
    adv.set_defaults(handler=_cmd_advise)
