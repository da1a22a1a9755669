"""`mlstack advise`, `mlstack memory`, `mlstack catalog`: the guidance layer on the command line.

Human output is aligned tables; `--json` prints one JSON document for machines. Every user error raises an
`MlstackError` subclass, which `mlstack.cli.main` prints as one line and turns into exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from mlstack.catalog.advisor import Advice, Option, advise_infer, advise_train
from mlstack.catalog.efa import efa_layout
from mlstack.catalog.instances import InstanceType, all_instances, catalog, get_instance
from mlstack.catalog.memory import (
    BYTES_PER_PARAM,
    FSDP_TO_ZERO,
    GB,
    GIB,
    ModelShape,
    activation_memory,
    model_state_memory,
    shape_for_params,
    zero_stage_for_fsdp,
)
from mlstack.errors import InputError

__all__ = ["register", "render_table"]


def _number(text: str) -> float:
    """argparse type for sizes such as `70e9`, `7.5e9`, `1_000`; range checks happen in the handlers."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _integer(text: str) -> int:
    value = _number(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """Aligned plain-text table; columns listed in `right` are right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


# ---------------------------------------------------------------------------------------------------- advise


def _shape_from_args(args: argparse.Namespace, params: float) -> ModelShape | None:
    given = [args.layers, args.hidden, args.heads, args.kv_heads]
    if all(v is None for v in given):
        return None
    if any(v is None for v in given):
        raise InputError("give all of --layers, --hidden, --heads and --kv-heads, or none of them")
    layers, hidden, heads, kv_heads = (int(v) for v in given)
    for name, value in (("--layers", layers), ("--hidden", hidden), ("--heads", heads), ("--kv-heads", kv_heads)):
        if value < 1:
            raise InputError(f"{name} must be positive, got {value}")
    if hidden % heads or heads % kv_heads:
        raise InputError(f"--hidden {hidden} must divide by --heads {heads}, and --heads by --kv-heads {kv_heads}")
    return ModelShape("given", params, layers, hidden, heads, kv_heads, hidden // heads)


def _money(value: float | None) -> str:
    return "price unknown" if value is None else f"{value:,.2f}"


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} h" if value >= 10 else f"{value:.1f} h"


def _option_row(rank: str, o: Option, *, train: bool) -> list[str]:
    used = "-" if o.used_bytes_per_device is None else f"{o.used_bytes_per_device / GIB:.1f}"
    usable = "-" if o.usable_bytes_per_device is None else f"{o.usable_bytes_per_device / GIB:.1f}"
    row = [
        rank,
        o.instance.name,
        str(o.nodes),
        o.describe_accelerators(),
        f"{used}/{usable}",
        f"{o.efa_gbps_per_node:g}" if o.efa_gbps_per_node else "no EFA",
        _money(o.price_per_hour),
    ]
    if train:
        row += [_hours(o.est_hours), "-" if o.est_cost is None else f"{o.est_cost:,.0f}"]
    row.append(o.reason)
    return row


def render_advice(advice: Advice, *, top: int, show_cut: bool) -> str:
    train = advice.task == "train"
    headers = ["#", "instance", "nodes", "accelerators", "GiB/device used/usable", "EFA Gbps/node", "$/h (all nodes)"]
    right = [0, 2, 4, 5, 6]
    if train:
        headers += ["est. time", "est. $"]
        right += [7, 8]
    headers.append("reason")
    lines = [f"mlstack advise --task {advice.task}  (catalog v{catalog().version}, reviewed {catalog().reviewed})"]
    lines += [f"  assumption: {a}" for a in advice.assumptions]
    lines.append("")
    chosen = advice.chosen[:top]
    if chosen:
        rows = [_option_row(str(i), o, train=train) for i, o in enumerate(chosen, 1)]
        lines.append(render_table(headers, rows, right=right))
        if len(advice.chosen) > top:
            lines.append(f"... {len(advice.chosen) - top} more options fit (--top N to show them)")
    else:
        lines.append("no option fits: see the cut options below (raise --max-nodes or --budget-per-hour)")
    cut = advice.cut
    if show_cut or not chosen:
        lines.append("")
        lines.append(render_table(headers, [_option_row("-", o, train=train) for o in cut], right=right))
    else:
        lines.append(f"{len(cut)} options cut (--all shows each with its reason)")
    return "\n".join(lines)


def _cmd_advise(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    shape = _shape_from_args(args, args.params) if args.params > 0 else None
    if args.task == "train":
        if args.context is not None or args.concurrency is not None:
            raise InputError("--context and --concurrency apply to --task infer, not train")
        advice = advise_train(
            args.params,
            precision=args.precision,
            tokens=args.tokens,
            max_nodes=64 if args.max_nodes is None else args.max_nodes,
            budget_per_hour=args.budget_per_hour,
            zero_stage=args.zero,
            headroom=args.headroom,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            mfu=args.mfu,
            shape=shape,
        )
    else:
        if args.tokens is not None:
            raise InputError("--tokens applies to --task train, not infer")
        advice = advise_infer(
            args.params,
            precision=args.precision,
            context=4096 if args.context is None else args.context,
            concurrency=1 if args.concurrency is None else args.concurrency,
            max_nodes=4 if args.max_nodes is None else args.max_nodes,
            budget_per_hour=args.budget_per_hour,
            headroom=args.headroom,
            cpu_max_params=args.cpu_max_params,
            shape=shape,
        )
    if args.json:
        _print_json(advice.to_json())
    else:
        print(render_advice(advice, top=args.top, show_cut=args.all))
    return 0


# ---------------------------------------------------------------------------------------------------- memory


def _cmd_memory(args: argparse.Namespace) -> int:
    if args.fsdp is not None and args.zero is not None:
        raise InputError("give --zero or --fsdp, not both")
    stage = zero_stage_for_fsdp(args.fsdp) if args.fsdp is not None else (0 if args.zero is None else args.zero)
    if stage not in (0, 1, 2, 3):
        raise InputError(f"--zero must be 0, 1, 2 or 3, got {stage}")
    if not 0 <= args.k <= 64:
        raise InputError(f"--k must be between 0 and 64, got {args.k:g}")
    states = model_state_memory(args.params, args.gpus, stage, optimizer_multiplier=args.k)
    data = states.to_json()
    if args.fsdp is not None:
        data["fsdp"] = args.fsdp.upper()
    act_json: dict[str, object] | None = None
    if args.seq_len is not None:
        shape = _shape_from_args(args, args.params) or shape_for_params(args.params)
        acts = activation_memory(
            layers=shape.layers,
            hidden=shape.hidden,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            heads=shape.heads,
            tensor_parallel=args.tp,
            checkpointing=args.checkpointing,
            flash_attention=args.flash_attention,
        )
        act_json = {
            "shape": shape.describe(),
            "checkpointing": acts.checkpointing,
            "formula": acts.formula,
            "bytes_per_device": acts.total_bytes,
            "gb_per_device": acts.total_bytes / GB,
        }
        data["activations"] = act_json
    if args.json:
        _print_json(data)
        return 0
    title = f"ZeRO-{stage}" + (f" (FSDP {args.fsdp.upper()})" if args.fsdp else "")
    print(f"model states per device: {args.params:g} params, {args.gpus} devices, {title}, K={args.k:g}")
    rows = [
        [name, f"{b:,.0f}", f"{b / GB:.3f}", f"{b / GIB:.3f}"]
        for name, b in (
            ("parameters", states.parameters_bytes),
            ("gradients", states.gradients_bytes),
            ("optimizer_states", states.optimizer_states_bytes),
            ("total", states.total_bytes),
        )
    ]
    if act_json is not None:
        b = float(act_json["bytes_per_device"])  # type: ignore[arg-type]
        rows.append([f"activations ({act_json['checkpointing']})", f"{b:,.0f}", f"{b / GB:.3f}", f"{b / GIB:.3f}"])
    print(render_table(["", "bytes", "GB", "GiB"], rows, right=[1, 2, 3]))
    if act_json is not None:
        print(f"activations: {act_json['formula']}; {act_json['shape']}")
    return 0


# ---------------------------------------------------------------------------------------------------- catalog


def _accel(it: InstanceType) -> str:
    return it.accelerator.describe() if it.accelerator else "-"


def _sm(it: InstanceType) -> str:
    flags = [("H", it.sagemaker_hosting), ("T", it.sagemaker_training), ("P", it.sagemaker_hyperpod)]
    return "".join(f if on else "." for f, on in flags)


def _cmd_catalog(args: argparse.Namespace) -> int:
    if args.instance_type:
        it = get_instance(args.instance_type)
        layout = efa_layout(it.name) if it.efa_supported else ()
        if args.json:
            data = it.to_json()
            data["efa_layout"] = [i.model_dump() for i in layout]
            data["catalog_version"] = catalog().version
            _print_json(data)
            return 0
        rows = [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in it.to_json().items()]
        print(render_table(["field", "value"], rows))
        if layout:
            print()
            print(f"EFA layout ({len([i for i in layout if i.is_efa])} EFA):")
            print(
                render_table(
                    ["card", "device", "type"],
                    [[str(i.network_card_index), str(i.device_index), i.interface_type] for i in layout],
                    right=[0, 1],
                )
            )
        return 0
    instances = all_instances()
    if args.json:
        _print_json(
            {
                "version": catalog().version,
                "generated": catalog().generated,
                "reviewed": catalog().reviewed,
                "instances": [it.to_json() for it in instances],
            }
        )
        return 0
    rows = [
        [
            it.name,
            _accel(it),
            str(it.vcpus),
            f"{it.memory_gib:g}",
            f"{it.network_gbps:g}",
            str(it.max_efa_interfaces) if it.efa_supported else "-",
            f"{it.local_nvme_count}x{it.local_nvme_gb}" if it.has_local_nvme else "-",
            {True: "yes", False: "no", None: "?"}[it.gpudirect_rdma],
            _sm(it),
            _money(it.price_per_hour),
        ]
        for it in instances
    ]
    print(f"mlstack instance catalog v{catalog().version} (reviewed {catalog().reviewed})")
    print("SM = SageMaker Hosting/Training/hyperPod; GDR = GPUDirect RDMA; Gbps from the API string ('Up to' = burst);")
    print("$/h = us-east-1 on-demand from an undated snapshot (see `mlstack catalog TYPE` for each price's note)")
    print(
        render_table(
            ["instance", "accelerators", "vCPU", "GiB", "Gbps", "EFA", "NVMe GB", "GDR", "SM", "$/h"],
            rows,
            right=[2, 3, 4, 5, 9],
        )
    )
    return 0


# ---------------------------------------------------------------------------------------------------- register


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `advise`, `memory` and `catalog` to the `mlstack` command."""
    shape_help = "model shape (all four, else the nearest published architecture to --params is assumed)"

    def add_shape(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("model shape", shape_help)
        g.add_argument("--layers", type=_integer)
        g.add_argument("--hidden", type=_integer)
        g.add_argument("--heads", type=_integer)
        g.add_argument("--kv-heads", type=_integer)

    adv = subparsers.add_parser(
        "advise",
        help="rank instance type x node count for training or serving a model",
        description="Rank instance type x node count for a task, keeping only options that fit with headroom.",
    )
    adv.add_argument("--task", choices=["train", "infer"], required=True)
    adv.add_argument("--params", type=_number, required=True, help="parameter count, e.g. 70e9")
    adv.add_argument("--precision", default="bf16", choices=sorted(BYTES_PER_PARAM), help="default bf16")
    adv.add_argument("--tokens", type=_number, help="train: token budget for a time/cost estimate")
    adv.add_argument("--max-nodes", type=_integer, help="default 64 (train) / 4 (infer)")
    adv.add_argument("--budget-per-hour", type=_number, help="USD per hour for all nodes together")
    adv.add_argument("--zero", type=_integer, default=3, help="train: ZeRO stage 0-3 (default 3)")
    adv.add_argument("--headroom", type=_number, default=0.15, help="memory kept free, fraction (default 0.15)")
    adv.add_argument("--seq-len", type=_integer, default=4096, help="train: sequence length (default 4096)")
    adv.add_argument("--micro-batch", type=_integer, default=1, help="train: micro-batch per device (default 1)")
    adv.add_argument("--mfu", type=_number, default=0.40, help="train: assumed model FLOPs utilisation (0.40)")
    adv.add_argument("--context", type=_integer, help="infer: context length in tokens (default 4096)")
    adv.add_argument("--concurrency", type=_integer, help="infer: concurrent sequences (default 1)")
    adv.add_argument("--cpu-max-params", type=_number, default=3e9, help="infer: largest model for CPU hosts")
    adv.add_argument("--top", type=_integer, default=10, help="chosen options to show (default 10)")
    adv.add_argument("--all", action="store_true", help="also list every cut option with its reason")
    adv.add_argument("--json", action="store_true", help="machine-readable output")
    add_shape(adv)
    adv.set_defaults(handler=_cmd_advise)

    mem = subparsers.add_parser(
        "memory",
        help="per-device training memory (ZeRO / FSDP model states, optional activations)",
        description="Per-device memory of mixed-precision Adam training (ZeRO paper formulas).",
    )
    mem.add_argument("--params", type=_number, required=True, help="parameter count, e.g. 7.5e9")
    mem.add_argument("--gpus", type=_integer, default=1, help="data-parallel devices N (default 1)")
    mem.add_argument("--zero", type=_integer, help="ZeRO stage 0-3 (default 0)")
    mem.add_argument("--fsdp", help=f"FSDP sharding strategy: {', '.join(FSDP_TO_ZERO)}")
    mem.add_argument("--k", type=_number, default=12.0, help="optimizer multiplier K (default 12)")
    mem.add_argument("--seq-len", type=_integer, help="also estimate activations for this sequence length")
    mem.add_argument("--micro-batch", type=_integer, default=1)
    mem.add_argument("--tp", type=_integer, default=1, help="tensor-parallel degree (default 1)")
    mem.add_argument("--checkpointing", choices=["none", "selective", "full"], default="full")
    mem.add_argument("--flash-attention", action="store_true", help="drop the 5as/h attention-score term")
    mem.add_argument("--json", action="store_true", help="machine-readable output")
    add_shape(mem)
    mem.set_defaults(handler=_cmd_memory)

    cat = subparsers.add_parser(
        "catalog",
        help="instance facts: one type in detail (with EFA layout) or the whole catalog",
        description="Show the instance catalog, or one instance type (EC2 or ml.* name) with its EFA layout.",
    )
    cat.add_argument("instance_type", nargs="?", metavar="TYPE", help="e.g. p5.48xlarge or ml.p5.48xlarge")
    cat.add_argument("--json", action="store_true", help="machine-readable output")
    cat.set_defaults(handler=_cmd_catalog)
