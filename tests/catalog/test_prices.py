"""Dated prices per billing service: every row dated and sourced, stale ones flagged, missing ones listed."""

from __future__ import annotations

import datetime as dt

import pytest

from mlstack.catalog.instances import all_instances
from mlstack.catalog.prices import SERVICES, load_prices, missing, oldest, price, price_table, stale
from mlstack.errors import CatalogError


def test_every_row_has_a_source_a_read_date_and_the_date_its_source_gives() -> None:
    table = price_table()
    assert set(table) == set(SERVICES)
    for service, rows in table.items():
        for row in rows:
            assert row.service == service and len(row.source) > 20
            assert dt.date.fromisoformat(row.read) >= dt.date.fromisoformat(row.date)


def test_every_priced_instance_is_in_the_catalog() -> None:
    names = {it.name for it in all_instances()}
    assert {r.instance for rows in price_table().values() for r in rows} <= names


def test_p_family_on_demand_prices_are_the_post_june_2025_ones_and_dated() -> None:
    # before AWS's June-2025 cut p5.48xlarge listed at $98.32/h, p4d.24xlarge at $32.77/h, p4de at $40.97/h
    before = {"p4d.24xlarge": 32.77, "p4de.24xlarge": 40.97, "p5.48xlarge": 98.32}
    for name, old in before.items():
        row = price(name)
        assert row is not None and row.as_of >= "2025-06-05" and row.usd_per_hour < 0.7 * old
    p5 = price("p5.48xlarge")
    assert p5 is not None and p5.usd_per_hour == 55.04 and "7412fd2" in p5.source
    assert missing(["p5e.48xlarge", "g5.xlarge", "p5e.48xlarge", "m7i.xlarge"]) == ["p5e.48xlarge", "m7i.xlarge"]


def test_capacity_block_rate_is_dated_by_its_source() -> None:
    cb = price("ml.p5.48xlarge", "capacity_block")
    assert cb is not None and cb.usd_per_hour == 39.33 and cb.as_of == "2024-12-31"
    assert stale(cb, dt.date(2026, 11, 30)) and not stale(cb, dt.date(2025, 1, 15))


def test_sagemaker_training_and_hyperpod_have_no_invented_prices() -> None:
    assert price("p5.48xlarge", "sagemaker_training") is None
    assert missing(["g5.xlarge"], "hyperpod") == ["g5.xlarge"]


def test_oldest() -> None:
    g5 = price("g5.xlarge")
    cb = price("p5.48xlarge", "capacity_block")
    assert g5 is not None and cb is not None
    assert g5.date == g5.as_of == "2026-01-21"
    assert oldest([g5, cb]) == cb and oldest([]) is None


BAD = [
    (
        "services: {ec2_on_demand: {description: d, rows: [{instance: g5.xlarge, region: us-east-1}]}}\nsources: {}",
        "usd_per_hour",
    ),
    (
        "sources: {}\nservices: {spot: {description: d, rows: []}}",
        "price file is invalid",
    ),
    (
        "sources: {}\nservices: {ec2_on_demand: {description: d, rows: ["
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: 1, source: 'a long enough source', read: '2026-11-30',"
        " as_of: '2026-11-30'},"
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: 2, source: 'a long enough source', read: '2026-11-30',"
        " as_of: '2026-11-30'}"
        "]}}",
        "two rows for g5.xlarge",
    ),
    (
        "sources: {}\nservices: {ec2_on_demand: {description: d, rows: ["
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: -1, source: 'a long enough source', read: '2026-11-30',"
        " as_of: '2026-11-30'}]}}",
        "greater than 0",
    ),
    (
        "sources: {}\nservices: {ec2_on_demand: {description: d, rows: ["
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: 1, source: 'a long enough source', read: '2026-11-30'}"
        "]}}",
        "as_of",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_price_files_are_rejected(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_prices(text)
