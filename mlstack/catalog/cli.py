"""`mlstack advise`, `mlstack memory`, `mlstack catalog`: the guidance layer on the command line.

Human output is aligned tables; `--json` prints one JSON document for machines. Every user error raises an
`MlstackError` subclass, which `mlstack.cli.main` prints as one line and turns into exit status 2.
"""

from __future__ import annotations

import argparse
import json

from mlstack.catalog.advise_cli import register_advise
from mlstack.catalog.cli_common import integer, money, number, print_json, shape_from_args
from mlstack.catalog.efa import efa_layout
from mlstack.catalog.instances import InstanceType, all_instances, catalog, get_instance
from mlstack.catalog.memory import (
    FSDP_TO_ZERO,
    GB,
    GIB,
    activation_memory,
    model_state_memory,
    shape_for_params,
    zero_stage_for_fsdp,
)
from mlstack.catalog.prices import price
from mlstack.catalog.prices_cli import register as register_prices
from mlstack.catalog.serve_check import register as register_serve_check
from mlstack.console import render_table
from mlstack.errors import InputError

__all__ = ["register"]


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
        shape = shape_from_args(args, args.params) or shape_for_params(args.params)
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
        print_json(data)
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


def _dated_view(it: InstanceType) -> dict[str, object]:
    """The instance's facts with its price fields taken from the dated price rows (never the undated catalog figure)."""
    data = it.to_json()
    dated = price(it.name)
    data["price_per_hour"] = None if dated is None else dated.usd_per_hour
    data["price_date"] = None if dated is None else dated.as_of
    data["price_source"] = "no dated EC2 on-demand rate (us-east-1) in the catalog" if dated is None else dated.source
    data.pop("price_note", None)
    return data


def _cmd_catalog(args: argparse.Namespace) -> int:
    if args.instance_type:
        it = get_instance(args.instance_type)
        layout = efa_layout(it.name) if it.efa_supported else ()
        if args.json:
            data = _dated_view(it)
            data["efa_layout"] = [i.model_dump() for i in layout]
            data["catalog_version"] = catalog().version
            print_json(data)
            return 0
        rows = [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in _dated_view(it).items()]
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
        print_json(
            {
                "version": catalog().version,
                "generated": catalog().generated,
                "reviewed": catalog().reviewed,
                "instances": [_dated_view(it) for it in instances],
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
            money(None if (dated := price(it.name)) is None else dated.usd_per_hour),
        ]
        for it in instances
    ]
    print(f"mlstack instance catalog v{catalog().version} (reviewed {catalog().reviewed})")
    print("SM = SageMaker Hosting/Training/hyperPod; GDR = GPUDirect RDMA; Gbps from the API string ('Up to' = burst);")
    print("$/h = us-east-1 on-demand, dated rows of data/training_prices.yaml ('price unknown': none; never estimated)")
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
        g.add_argument("--layers", type=integer)
        g.add_argument("--hidden", type=integer)
        g.add_argument("--heads", type=integer)
        g.add_argument("--kv-heads", type=integer)

    register_advise(subparsers, add_shape)
    register_prices(subparsers)
    register_serve_check(subparsers)

    mem = subparsers.add_parser(
        "memory",
        help="per-device training memory (ZeRO / FSDP model states, optional activations)",
        description="Per-device memory of mixed-precision Adam training (ZeRO paper formulas).",
    )
    mem.add_argument("--params", type=number, required=True, help="parameter count, e.g. 7.5e9")
    mem.add_argument("--gpus", type=integer, default=1, help="data-parallel devices N (default 1)")
    mem.add_argument("--zero", type=integer, help="ZeRO stage 0-3 (default 0)")
    mem.add_argument("--fsdp", help=f"FSDP sharding strategy: {', '.join(FSDP_TO_ZERO)}")
    mem.add_argument("--k", type=number, default=12.0, help="optimizer multiplier K (default 12)")
    mem.add_argument("--seq-len", type=integer, help="also estimate activations for this sequence length")
    mem.add_argument("--micro-batch", type=integer, default=1)
    mem.add_argument("--tp", type=integer, default=1, help="tensor-parallel degree (default 1)")
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
