"""AWS Deep Learning Container registries (`data/dlc_registries.yaml`): the ECR account of each region.

DLC registries are regional and not all in one account (the opt-in regions and China have their own), so a
blueprint names the repository and tag and the account comes from this table for the blueprint's region.
"""

from __future__ import annotations

import functools
import re

from pydantic import BaseModel, ConfigDict, Field

from mlstack import resources, yamlload

REGISTRIES_FILE = "dlc_registries.yaml"
"""Catalog data file (read through `mlstack.resources`, so an installed package finds it)."""

_ACCOUNT = r"^\d{12}$"
_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"


class DlcRegistries(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    read: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    registries: dict[str, str]

    def account(self, region: str) -> str | None:
        return self.registries.get(region)

    @property
    def accounts(self) -> frozenset[str]:
        return frozenset(self.registries.values())


@functools.cache
def dlc_registries() -> DlcRegistries:
    """The table, checked: every key a region code, every value a 12-digit account."""
    table = DlcRegistries.model_validate(yamlload.safe_load(resources.catalog_text(REGISTRIES_FILE)))
    for region, account in table.registries.items():
        if not re.fullmatch(_REGION, region) or not re.fullmatch(_ACCOUNT, account):
            raise ValueError(f"{REGISTRIES_FILE}: {region}: {account!r} is not a region and a 12-digit account")
    return table


def dlc_account(region: str) -> str | None:
    """The DLC registry account of `region`, or None when the table does not list the region."""
    return dlc_registries().account(region)
