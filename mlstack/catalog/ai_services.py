"""AI services catalog: supported regions and languages, Bedrock model IDs and dated prices.

The facts live in `data/ai_services.yaml` (written by hand, every fact with its source). This module validates
that file once (cached) and answers lookups; nothing here reads the clock, the environment or the network.
"""

from __future__ import annotations

import functools
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlstack import yamlload

__all__ = ["AiCatalog", "BedrockModel", "Price", "ServiceFacts", "ai_catalog", "foundation_model_arn"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ServiceFacts(BaseModel):
    model_config = _FROZEN

    regions: tuple[str, ...] | None
    """Regions the API is offered in; None when the catalog does not know (then nothing is rejected)."""
    regions_source: str
    languages: dict[str, tuple[str, ...]]
    """Feature (`entities`, `sentiment`, `pii`) -> accepted language codes."""
    languages_source: str


class BedrockModel(BaseModel):
    model_config = _FROZEN

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)


class Price(BaseModel):
    model_config = _FROZEN

    id: str
    service: str
    item: str
    unit: str
    usd: float | None = Field(ge=0)
    """USD per `unit`; None when the published number could not be confirmed."""
    region: str
    source: str = Field(min_length=1)
    date: str | None = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    """The date the source states the price for; required when `usd` is given (an undated price is never used)."""

    @model_validator(mode="after")
    def _dated(self) -> Price:
        if self.usd is not None and self.date is None:
            raise ValueError(f"price {self.id}: a usd value needs the date its source gives it (date)")
        return self


class AiCatalog(BaseModel):
    model_config = _FROZEN

    version: int
    reviewed: str
    services: dict[str, ServiceFacts]
    bedrock_models_source: str
    bedrock_models: tuple[BedrockModel, ...]
    prices: tuple[Price, ...]

    def service(self, name: str) -> ServiceFacts:
        return self.services[name]

    def price(self, price_id: str) -> Price:
        for price in self.prices:
            if price.id == price_id:
                return price
        raise KeyError(f"no price {price_id!r} in the AI services catalog")

    @property
    def bedrock_model_ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.bedrock_models)


@functools.cache
def ai_catalog() -> AiCatalog:
    """The validated catalog (read once per process)."""
    text = resources.files("mlstack.catalog").joinpath("data/ai_services.yaml").read_text(encoding="utf-8")
    return AiCatalog.model_validate(yamlload.safe_load(text))


def foundation_model_arn(partition: str, region: str, model_id: str) -> str:
    """A foundation model's ARN: no account field (`arn:aws:bedrock:us-east-1::foundation-model/<id>`)."""
    return f"arn:{partition}:bedrock:{region}::foundation-model/{model_id}"
