"""Dated hourly prices per billing service (training side), from `data/training_prices.yaml`.

A price is a row (instance, region, usd_per_hour, source, read, as_of) of one service: EC2 on-demand, SageMaker
training, SageMaker HyperPod or EC2 Capacity Blocks. `as_of` (the date the source states its rate for) is required:
an undated rate is refused when the file loads, so nothing can price with one. A type without a row has no price
for that service: callers show "price unknown" and list it (`missing`); nothing is estimated or borrowed from
another service. Nothing here reads the clock: `stale` takes the day to compare against.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlstack import resources
from mlstack.errors import CatalogError

__all__ = [
    "MAX_PRICE_AGE_DAYS",
    "SERVICES",
    "DatedPrice",
    "Service",
    "date_is_stale",
    "missing",
    "oldest",
    "price",
    "price_table",
    "stale",
]

Service = Literal["ec2_on_demand", "sagemaker_training", "hyperpod", "capacity_block"]
SERVICES: tuple[Service, ...] = ("ec2_on_demand", "sagemaker_training", "hyperpod", "capacity_block")
MAX_PRICE_AGE_DAYS = 90
"""A price whose date (`as_of`, else `read`) is older than this is reported as stale."""

_DATE = r"^\d{4}-\d{2}-\d{2}$"


class DatedPrice(BaseModel):
    """One hourly price of one instance type in one region, billed by one service."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: str = Field(pattern=r"^[a-z0-9-]+\.[a-z0-9-]+$")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    usd_per_hour: float = Field(gt=0, lt=10_000)
    source: str = Field(min_length=10)
    read: str = Field(pattern=_DATE)
    as_of: str = Field(pattern=_DATE)
    """The date the source states its rate for (required: an undated rate is never used)."""
    service: Service = "ec2_on_demand"

    @property
    def date(self) -> str:
        """The date the price stands for (`as_of`)."""
        return self.as_of

    def describe(self) -> str:
        return f"${self.usd_per_hour:,.4g}/h {self.service} {self.region} (as of {self.as_of}, read {self.read})"


class _ServicePrices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str
    rows: tuple[DatedPrice, ...]


class _PriceFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sources: dict[str, str]
    services: dict[Service, _ServicePrices]


DATA_FILE = "training_prices.yaml"


def load_prices(text: str) -> dict[Service, tuple[DatedPrice, ...]]:
    """Validate the price YAML text; each row learns its service. Duplicate (instance, region) rows are errors."""
    try:
        raw = yaml.safe_load(text)
        if isinstance(raw, dict) and isinstance(raw.get("services"), dict):
            for name, block in raw["services"].items():
                for row in (block or {}).get("rows") or []:
                    if isinstance(row, dict):
                        row.setdefault("service", name)
        parsed = _PriceFile.model_validate(raw)
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"price file is invalid: {err}".replace("\n", " | ")) from err
    out: dict[Service, tuple[DatedPrice, ...]] = {}
    for service, block in parsed.services.items():
        seen: set[tuple[str, str]] = set()
        for row in block.rows:
            key = (row.instance, row.region)
            if key in seen:
                raise CatalogError(f"price file is invalid: {service} has two rows for {row.instance} {row.region}")
            seen.add(key)
        out[service] = block.rows
    return out


@functools.cache
def price_table() -> dict[Service, tuple[DatedPrice, ...]]:
    text = resources.catalog_text(DATA_FILE)
    return load_prices(text)


def price(instance: str, service: Service = "ec2_on_demand", region: str = "us-east-1") -> DatedPrice | None:
    """The dated price of `instance` (EC2 name; `ml.` prefix accepted) for `service` in `region`, or None."""
    name = instance.strip().lower().removeprefix("ml.")
    for row in price_table().get(service, ()):
        if row.instance == name and row.region == region:
            return row
    return None


def oldest(prices: list[DatedPrice]) -> DatedPrice | None:
    """The price with the oldest date among `prices` (None when empty)."""
    return min(prices, key=lambda p: p.date) if prices else None


def stale(p: DatedPrice, today: dt.date, max_age_days: int = MAX_PRICE_AGE_DAYS) -> bool:
    """True when the price's date is more than `max_age_days` before `today`."""
    return date_is_stale(p.date, today, max_age_days)


def date_is_stale(date: str, today: dt.date, max_age_days: int = MAX_PRICE_AGE_DAYS) -> bool:
    """True when the ISO `date` is more than `max_age_days` before `today`."""
    return (today - dt.date.fromisoformat(date)).days > max_age_days


def missing(instances: list[str], service: Service = "ec2_on_demand", region: str = "us-east-1") -> list[str]:
    """The instance types of `instances` with no price for `service` in `region`, in order, without repeats."""
    out: list[str] = []
    for name in instances:
        if price(name, service, region) is None and name not in out:
            out.append(name)
    return out
