"""Helpers shared by the catalog commands (`advise`, `memory`, `catalog`): number parsing, tables, JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from mlstack.catalog.memory import ModelShape
from mlstack.errors import InputError

__all__ = ["integer", "money", "number", "print_json", "render_table", "shape_from_args"]


def number(text: str) -> float:
    """argparse type for sizes such as `70e9`, `7.5e9`, `1_000`; range checks happen in the handlers."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def integer(text: str) -> int:
    value = number(text)
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


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def shape_from_args(args: argparse.Namespace, params: float) -> ModelShape | None:
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


def money(value: float | None) -> str:
    return "price unknown" if value is None else f"{value:,.2f}"
