"""Dated prices per billing service: every row dated and sourced, stale ones flagged, missing ones listed."""

from __future__ import annotations

import datetime as dt

import pytest

from mlstack.catalog.instances import all_instances
from mlstack.catalog.prices import SERVICES, load_prices, missing, oldest, price, price_table, stale
from mlstack.errors import CatalogError


def test_every_row_has_a_source_and_a_read_date() -> None:
    table = price_table()
    assert set(table) == set(SERVICES)
    for service, rows in table.items():
        for row in rows:
            assert row.service == service and len(row.source) > 20
            assert dt.date.fromisoformat(row.read) >= dt.date.fromisoformat(row.date)


def test_every_priced_instance_is_in_the_catalog() -> None:
    names = {it.name for it in all_instances()}
    assert {r.instance for rows in price_table().values() for r in rows} <= names


def test_pre_cut_p_family_on_demand_prices_are_not_used() -> None:
    # the only rows read showed the list price from before the June-2025 P4/P5 on-demand cut: left missing
    for name in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"):
        assert price(name) is None
    assert missing(["p5.48xlarge", "g5.xlarge", "p5.48xlarge"]) == ["p5.48xlarge"]


def test_capacity_block_rate_is_dated_by_its_source() -> None:
    cb = price("ml.p5.48xlarge", "capacity_block")
    assert cb is not None and cb.usd_per_hour == 39.33 and cb.as_of == "2024-12-31"
    assert stale(cb, dt.date(2026, 11, 30)) and not stale(cb, dt.date(2025, 1, 15))


def test_sagemaker_training_and_hyperpod_have_no_invented_prices() -> None:
    assert price("p5.48xlarge", "sagemaker_training") is None
    assert missing(["g5.xlarge"], "hyperpod") == ["g5.xlarge"]


def test_oldest_and_undated() -> None:
    g5 = price("g5.xlarge")
    cb = price("p5.48xlarge", "capacity_block")
    assert g5 is not None and cb is not None
    assert g5.undated_source and g5.date == g5.read  # undated snapshot: the read date is all there is
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
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: 1, source: 'a long enough source', read: '2026-11-30'},"
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: 2, source: 'a long enough source', read: '2026-11-30'}"
        "]}}",
        "two rows for g5.xlarge",
    ),
    (
        "sources: {}\nservices: {ec2_on_demand: {description: d, rows: ["
        "{instance: g5.xlarge, region: us-east-1, usd_per_hour: -1, source: 'a long enough source', read: '2026-11-30'}"
        "]}}",
        "greater than 0",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_price_files_are_rejected(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_prices(text)
