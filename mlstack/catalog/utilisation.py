"""Achieved training utilisation from published runs (`data/utilisation.yaml`) and the pick the advisor uses.

What moves a real run's time, and how each enters:
- accelerator family and precision: only rows of the same family (or its alias) and precision are used;
- model size: small models reach a smaller share of the peak on H100 at the global batch sizes large runs use
  (Llama 3 8B 20%, 70B 32%, 405B 36% effective on the Llama 3 model card's GPU-hours), so the effective
  utilisation is interpolated on log params between the published size points of the family;
- sequence length: attention FLOPs (12 L h s per token, which 6ND leaves out) are added to each row and taken out
  again at the target's own sequence length and shape;
- goodput: restarts and failures, where a source states them (Llama 3: ">90% effective training time"); rows
  derived from published GPU-hours already contain them.

Training time then follows the 6 x params x tokens count: hours = 6 N D / (devices x peak x MFU x goodput) / 3600,
printed with a range of x/÷ `UNCERTAINTY` that the runs the table was not fitted to fall inside.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlstack import resources
from mlstack.catalog.memory import shape_for_params
from mlstack.errors import CatalogError, InputError

__all__ = [
    "UNCERTAINTY",
    "UtilisationPick",
    "UtilisationRow",
    "attention_share",
    "effective_utilisation",
    "pick",
    "rows",
    "training_hours",
]

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
    flops_counted: Literal["6N", "6N+attention"] = "6N"
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
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


UNCERTAINTY = 1.3
"""The printed range is the point estimate x/÷ this factor (high/low = 1.69, under 2x). It covers the residuals of
the published runs the table was NOT fitted to (tests/catalog/test_utilisation_checks.py): all inside, most within
20%. A family with no row of its own borrows from another family and gets the wider BORROWED_UNCERTAINTY."""
BORROWED_UNCERTAINTY = 1.4

_SAME_SIZE = math.log(1.5)
"""Rows within a factor 1.5 of each other in parameters are one size point (their median is used)."""


def attention_share(params: float, layers: int, hidden: int, seq_len: int) -> float:
    """Attention FLOPs per token over 6 x params: 12 x L x h x s / (6 N) (PaLM, arXiv:2204.02311, appendix B).

    Long sequences on small models spend a large share of their time in attention, which the 6ND count leaves
    out: Llama 3 8B at 8192 tokens does 27% more work per token than 6N says, Llama 3.1 405B 8%.
    """
    return 2.0 * layers * hidden * seq_len / params


def _row_shape(r: UtilisationRow) -> tuple[int, int]:
    if r.layers is not None and r.hidden is not None:
        return r.layers, r.hidden
    shape = shape_for_params(r.params)
    return shape.layers, shape.hidden


def effective_utilisation(r: UtilisationRow) -> float:
    """The row's useful FLOPs, attention included, over peak, times its goodput: what is interpolated."""
    layers, hidden = _row_shape(r)
    counted = 1.0 if r.flops_counted == "6N+attention" else 1.0 + attention_share(r.params, layers, hidden, r.seq_len)
    return r.mfu * counted * r.goodput


@dataclass(frozen=True)
class UtilisationPick:
    """The utilisation used for a time estimate at one model size, its range and how it was chosen.

    `mfu` is the share of dense peak spent on the 6 x params x tokens count (attention FLOPs at the target's
    sequence length already folded in), `goodput` the share of wall-clock time spent training; the time estimate
    is 6ND / (devices x peak x mfu x goodput). `low`/`high` bound `mfu`; the hours' range is the inverse.
    """

    row: UtilisationRow
    mfu: float
    goodput: float
    low: float
    high: float
    note: str
    borrowed: bool = False
    factor: float = UNCERTAINTY

    @property
    def label(self) -> str:
        how = "borrowed from" if self.borrowed else "near"
        return f"MFU {self.mfu:.0%} (range {self.low:.0%}-{self.high:.0%}) {how} {self.row.id}"

    def hours_range(self, hours: float) -> tuple[float, float]:
        """(low, high) hours around a point estimate made with this pick."""
        return hours / self.factor, hours * self.factor

    def to_json(self) -> dict[str, object]:
        return {
            "row": self.row.id,
            "mfu": self.mfu,
            "mfu_low": self.low,
            "mfu_high": self.high,
            "goodput": self.goodput,
            "uncertainty_factor": self.factor,
            "source": self.row.source,
            "source_date": self.row.date,
            "note": self.note,
            "borrowed": self.borrowed,
        }


def _size_points(candidates: list[UtilisationRow]) -> list[tuple[float, float, float]]:
    """(log params, effective utilisation, goodput) per size point, smallest first; rows of one size -> median."""
    ordered = sorted(candidates, key=lambda r: r.params)
    groups: list[list[UtilisationRow]] = []
    for r in ordered:
        if groups and math.log(r.params / groups[-1][0].params) <= _SAME_SIZE:
            groups[-1].append(r)
        else:
            groups.append([r])
    return [
        (
            statistics.fmean(math.log(r.params) for r in g),
            statistics.median(effective_utilisation(r) for r in g),
            statistics.median(r.goodput for r in g),
        )
        for g in groups
    ]


def _interpolate(points: list[tuple[float, float, float]], x: float) -> tuple[float, float]:
    """Piecewise linear in log params between size points, flat beyond the smallest and largest."""
    if x <= points[0][0]:
        return points[0][1], points[0][2]
    if x >= points[-1][0]:
        return points[-1][1], points[-1][2]
    for (x0, u0, g0), (x1, u1, g1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            t = (x - x0) / (x1 - x0)
            return u0 + t * (u1 - u0), g0 + t * (g1 - g0)
    raise AssertionError("unreachable: x lies between the first and last point")


def pick(
    accelerator: str,
    params: float,
    precision: str = "bf16",
    *,
    seq_len: int = 4096,
    layers: int | None = None,
    hidden: int | None = None,
) -> UtilisationPick:
    """Utilisation for training `params` on `accelerator` at `precision` (fp16 counts as bf16) and `seq_len`.

    The published runs of the same family and precision give one effective utilisation per model size (attention
    FLOPs and goodput included); the target's is interpolated on log params (small models reach less of the peak on
    H100 at the batch sizes large runs use), then the target's own attention share at `seq_len` is taken out so
    that the time estimate can use 6ND. `layers`/`hidden` default to the nearest reference shape.
    """
    if not params > 0:
        raise InputError(f"parameter count must be positive, got {params:g}")
    if seq_len <= 0:
        raise InputError(f"sequence length must be positive, got {seq_len}")
    table, aliases = _table()
    prec = "bf16" if precision.lower() in ("bf16", "fp16", "fp32") else precision.lower()
    family = aliases.get(accelerator, accelerator)
    same = [r for r in table if r.accelerator == family and r.precision == prec]
    borrowed = not same
    if same:
        via = f" (as {family}: same compute die)" if family != accelerator else ""
        note = f"interpolated on model size between published {family} {prec} runs{via}"
    else:
        same = [r for r in table if r.precision == prec] or list(table)
        note = f"no published {accelerator} {prec} run read; utilisation borrowed from another accelerator"
    x = math.log(params)
    if borrowed:  # borrow from the single family whose runs sit nearest in size, not a blend of families
        nearest = min(same, key=lambda r: abs(math.log(r.params) - x))
        same = [r for r in same if r.accelerator == nearest.accelerator]
    effective, goodput = _interpolate(_size_points(same), x)
    if layers is None or hidden is None:
        shape = shape_for_params(params)
        layers, hidden = layers or shape.layers, hidden or shape.hidden
    mfu = min(effective / goodput / (1.0 + attention_share(params, layers, hidden, seq_len)), 0.8)
    factor = BORROWED_UNCERTAINTY if borrowed else UNCERTAINTY
    best = min(abs(math.log(r.params) - x) for r in same)
    at_size = sorted((r for r in same if abs(math.log(r.params) - x) <= best + _SAME_SIZE), key=effective_utilisation)
    nearest_row = at_size[len(at_size) // 2]  # the middle setting of the nearest size, for the label and source
    return UtilisationPick(
        row=nearest_row,
        mfu=mfu,
        goodput=goodput,
        low=mfu / factor,
        high=min(mfu * factor, 0.9),
        note=note,
        borrowed=borrowed,
        factor=factor,
    )


def training_hours(params: float, tokens: float, devices: int, peak_tflops: float, chosen: UtilisationPick) -> float:
    """Wall-clock hours: 6 x params x tokens / (devices x peak x MFU x goodput)."""
    return 6.0 * params * tokens / (devices * peak_tflops * 1e12 * chosen.mfu * chosen.goodput) / 3600.0
