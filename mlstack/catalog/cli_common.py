"""Helpers shared by the catalog commands (`advise`, `memory`, `catalog`): number parsing and JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys

from mlstack.catalog.memory import ModelShape
from mlstack.errors import InputError

__all__ = ["integer", "money", "number", "print_json", "shape_from_args"]


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
