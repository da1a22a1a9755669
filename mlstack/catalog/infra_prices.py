"""Dated infrastructure unit prices (`data/infra_prices.yaml`): NAT gateway, interface endpoint, EKS control plane.

Each row is one unit price in one region with the date its source states it for (`as_of`, required) and the
source. `infra_price` returns None for an item or region without a row: the plan then names the item unpriced,
with the reason, instead of guessing. Nothing here reads the clock or the network.
"""

from __future__ import annotations

import functools

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlstack import resources
from mlstack.errors import CatalogError

__all__ = ["DATA_FILE", "InfraPrice", "infra_price", "infra_prices", "load_infra_prices"]

DATA_FILE = "infra_prices.yaml"
_DATE = r"^\d{4}-\d{2}-\d{2}$"


class InfraPrice(BaseModel):
    """One unit price (USD per `unit`) of one infrastructure item in one region."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    item: str = Field(min_length=3)
    unit: str = Field(min_length=3)
    usd: float = Field(gt=0, lt=10_000)
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    source: str = Field(min_length=10)
    read: str = Field(pattern=_DATE)
    as_of: str = Field(pattern=_DATE)
    """The date the source states the rate for (required: an undated rate is never used)."""

    @property
    def date(self) -> str:
        return self.as_of


class _InfraFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sources: dict[str, str]
    prices: tuple[InfraPrice, ...]


def load_infra_prices(text: str) -> dict[tuple[str, str], InfraPrice]:
    """Validate the file's text; a row without `as_of`, or two rows for one (id, region), is an error."""
    try:
        parsed = _InfraFile.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"infra price file is invalid: {err}".replace("\n", " | ")) from err
    out: dict[tuple[str, str], InfraPrice] = {}
    for row in parsed.prices:
        key = (row.id, row.region)
        if key in out:
            raise CatalogError(f"infra price file is invalid: two rows for {row.id} in {row.region}")
        out[key] = row
    return out


@functools.cache
def infra_prices() -> dict[tuple[str, str], InfraPrice]:
    return load_infra_prices(resources.catalog_text(DATA_FILE))


def infra_price(item_id: str, region: str) -> InfraPrice | None:
    """The dated price of `item_id` in `region`, or None when the file has none."""
    return infra_prices().get((item_id, region))
