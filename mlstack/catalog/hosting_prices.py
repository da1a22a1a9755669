"""SageMaker hosting prices (`data/sagemaker_hosting_prices.yaml`): ml.* rates per instance-hour, by region.

Kept apart from the EC2 instance catalog: SageMaker bills hosting at its own rates, and an EC2 rate must never
stand in for one. `hosting_price` returns None for a type or region without a published rate in the file.
"""

from __future__ import annotations

import functools
import re

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mlstack import resources

PRICES_FILE = "sagemaker_hosting_prices.yaml"
"""Catalog data file (read through `mlstack.resources`, so an installed package finds it)."""


class HostingPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instance: str = Field(pattern=r"^ml\.[a-z0-9-]+\.[a-z0-9-]+$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    usd_per_hour: float = Field(gt=0)
    source: str = Field(min_length=10)
    read: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    as_of: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    """The date the source states the rate for (required: an undated rate is never used)."""

    @property
    def date(self) -> str:
        return self.as_of


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sources: dict[str, str] = {}
    prices: list[HostingPrice]


@functools.cache
def hosting_prices() -> dict[tuple[str, str], HostingPrice]:
    """Every row of the file by (instance, region); a duplicate row is an error."""
    return load_hosting_prices(resources.catalog_text(PRICES_FILE))


def load_hosting_prices(text: str) -> dict[tuple[str, str], HostingPrice]:
    """Validate the hosting price YAML text; a row without `as_of` or a duplicate row is an error."""
    rows = _PriceFile.model_validate(yaml.safe_load(text)).prices
    result: dict[tuple[str, str], HostingPrice] = {}
    for row in rows:
        key = (row.instance, row.region)
        if key in result:
            raise ValueError(f"{PRICES_FILE}: {row.instance} in {row.region} is listed twice")
        result[key] = row
    return result


def hosting_price(instance_type: str, region: str) -> HostingPrice | None:
    """The SageMaker hosting rate of `ml.*` type in `region`, or None when the file has none."""
    if not re.match(r"^ml\.", instance_type):
        raise ValueError(f"{instance_type!r} is not a SageMaker instance type (ml.*)")
    return hosting_prices().get((instance_type, region))
