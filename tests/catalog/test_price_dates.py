"""Every shipped price row carries the date its source gives it (`as_of`) and its source; undated rows do not load."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from mlstack import resources
from mlstack.catalog.ai_services import ai_catalog
from mlstack.catalog.hosting_prices import hosting_prices, load_hosting_prices
from mlstack.catalog.infra_prices import infra_prices, load_infra_prices
from mlstack.catalog.prices import price_table
from mlstack.errors import CatalogError

TODAY = dt.date(2026, 12, 1)  # the day the rows were read; no row may claim a later date


def _dated(as_of: str, read: str) -> bool:
    return dt.date.fromisoformat(as_of) <= dt.date.fromisoformat(read) <= TODAY


def test_every_training_hosting_and_infra_row_is_dated_and_sourced() -> None:
    rows = [r for service in price_table().values() for r in service]
    assert len(rows) > 100
    assert all(_dated(r.as_of, r.read) and len(r.source) > 20 for r in rows)
    assert all(_dated(r.as_of, r.read) and len(r.source) > 20 for r in hosting_prices().values())
    assert all(_dated(r.as_of, r.read) and len(r.source) > 20 for r in infra_prices().values())


def test_every_ai_service_price_with_a_value_has_a_date() -> None:
    priced = [p for p in ai_catalog().prices if p.usd is not None]
    assert priced and all(p.date for p in priced)
    with pytest.raises(ValueError, match="needs the date its source gives it"):
        type(priced[0]).model_validate({**priced[0].model_dump(), "date": None})


def test_undated_rows_are_refused_by_every_loader() -> None:
    hosting = yaml.safe_load(resources.catalog_text("sagemaker_hosting_prices.yaml"))
    del hosting["prices"][0]["as_of"]
    with pytest.raises(ValueError, match="as_of"):
        load_hosting_prices(yaml.safe_dump(hosting))
    infra = yaml.safe_load(resources.catalog_text("infra_prices.yaml"))
    del infra["prices"][0]["as_of"]
    with pytest.raises(CatalogError, match="as_of"):
        load_infra_prices(yaml.safe_dump(infra))
    infra = yaml.safe_load(resources.catalog_text("infra_prices.yaml"))
    infra["prices"].append(infra["prices"][0])
    with pytest.raises(CatalogError, match=r"two rows for vpc\.nat_gateway\.hour in us-east-1"):
        load_infra_prices(yaml.safe_dump(infra))


def test_infra_rates_the_plans_use_are_present() -> None:
    table = infra_prices()
    for item_id in ("vpc.nat_gateway.hour", "vpc.interface_endpoint.az_hour", "eks.cluster.standard.hour"):
        assert (item_id, "us-east-1") in table
    assert table[("eks.cluster.extended.hour", "us-east-1")].usd == 0.60
