"""Achieved training utilisation from published runs (`data/utilisation.yaml`) and the pick the advisor uses.

`pick(accelerator, params, precision)` returns the row nearest to the model (same accelerator family, or its alias,
and same precision; nearest parameter count on a log scale). Where several rows sit at that size (one run at
several settings, or several sources), the middle one is used and the spread is returned as a range. A family with
no row borrows the MFU of the nearest row of any family, and says so.

Training time then follows the usual 6 x params x tokens model-FLOPs count:
hours = 6 N D / (devices x peak x MFU x goodput) / 3600.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlstack import resources
from mlstack.errors import CatalogError, InputError

__all__ = ["UtilisationPick", "UtilisationRow", "pick", "rows", "training_hours"]

_DATE = r"^\d{4}-\d{2}-\d{2}$"


class UtilisationRow(BaseModel):
    """One published run (see the field notes at the top of the data file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    accelerator: str = Field(min_length=1)
    model: str = Field(min_length=1)
    params: float = Field(gt=1e6, lt=1e14)
    precision: Literal["bf16", "fp8"]
    devices: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    parallelism: str = Field(min_length=1)
    model_tflops: float = Field(gt=0)
    peak_tflops: float = Field(gt=0)
    goodput: float = Field(gt=0.5, le=1.0)
    derivation: str = Field(min_length=1)
    source: str = Field(min_length=20)
    date: str = Field(pattern=_DATE)

    @property
    def mfu(self) -> float:
        return self.model_tflops / self.peak_tflops

    def describe(self) -> str:
        return (
            f"{self.model} on {self.devices} {self.accelerator} ({self.precision}, seq {self.seq_len}, "
            f"{self.parallelism}): MFU {self.mfu:.1%}" + (f", goodput {self.goodput:.0%}" if self.goodput < 1 else "")
        )


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[UtilisationRow, ...] = Field(min_length=1)
    aliases: dict[str, str] = {}


def load_utilisation(text: str) -> tuple[tuple[UtilisationRow, ...], dict[str, str]]:
    try:
        parsed = _File.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"utilisation table is invalid: {err}".replace("\n", " | ")) from err
    ids = [r.id for r in parsed.rows]
    if len(ids) != len(set(ids)):
        raise CatalogError("utilisation table is invalid: duplicate row ids")
    bad = [r.id for r in parsed.rows if not 0.05 <= r.mfu <= 0.8]
    if bad:
        raise CatalogError(f"utilisation table is invalid: MFU outside 5-80% for {bad}")
    return parsed.rows, parsed.aliases


@functools.cache
def _table() -> tuple[tuple[UtilisationRow, ...], dict[str, str]]:
    text = resources.catalog_text("utilisation.yaml")
    return load_utilisation(text)


def rows() -> tuple[UtilisationRow, ...]:
    return _table()[0]


@dataclass(frozen=True)
class UtilisationPick:
    """The row used for a time estimate, the MFU range of the rows at the same size, and how it was chosen."""

    row: UtilisationRow
    mfu: float
    goodput: float
    low: float
    high: float
    note: str
    borrowed: bool = False

    @property
    def label(self) -> str:
        spread = f" (range {self.low:.0%}-{self.high:.0%})" if self.high - self.low >= 0.005 else ""
        how = "borrowed from" if self.borrowed else "from"
        return f"MFU {self.mfu:.0%}{spread} {how} {self.row.id}"

    def to_json(self) -> dict[str, object]:
        return {
            "row": self.row.id,
            "mfu": self.mfu,
            "mfu_low": self.low,
            "mfu_high": self.high,
            "goodput": self.goodput,
            "source": self.row.source,
            "source_date": self.row.date,
            "note": self.note,
            "borrowed": self.borrowed,
        }


def _nearest(candidates: list[UtilisationRow], params: float) -> list[UtilisationRow]:
    best = min(abs(math.log(r.params / params)) for r in candidates)
    return [r for r in candidates if abs(math.log(r.params / params)) <= best + 1e-9]


def pick(accelerator: str, params: float, precision: str = "bf16") -> UtilisationPick:
    """The published row nearest to training `params` on `accelerator` at `precision` (fp16 counts as bf16)."""
    if not params > 0:
        raise InputError(f"parameter count must be positive, got {params:g}")
    table, aliases = _table()
    prec = "bf16" if precision.lower() in ("bf16", "fp16", "fp32") else precision.lower()
    family = aliases.get(accelerator, accelerator)
    same = [r for r in table if r.accelerator == family and r.precision == prec]
    borrowed = not same
    if same:
        via = f" (as {family}: same compute die)" if family != accelerator else ""
        note = f"nearest published {accelerator} run{via}"
    else:
        same = [r for r in table if r.precision == prec] or list(table)
        note = f"no published {accelerator} {prec} run read; MFU borrowed from another accelerator"
    at_size = sorted(_nearest(same, params), key=lambda r: r.mfu)
    mid = at_size[len(at_size) // 2]
    return UtilisationPick(
        row=mid,
        mfu=mid.mfu,
        goodput=mid.goodput,
        low=at_size[0].mfu,
        high=at_size[-1].mfu,
        note=note,
        borrowed=borrowed,
    )


def training_hours(params: float, tokens: float, devices: int, peak_tflops: float, chosen: UtilisationPick) -> float:
    """Wall-clock hours: 6 x params x tokens / (devices x peak x MFU x goodput)."""
    return 6.0 * params * tokens / (devices * peak_tflops * 1e12 * chosen.mfu * chosen.goodput) / 3600.0
