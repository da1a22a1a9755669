"""`mlstack prices refresh` against botocore's Stubber: requests and responses of the Price List API's real shape."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from mlstack.catalog.price_refresh import API_SOURCE, default_path, fetch_prices, refresh_file
from mlstack.catalog.prices import load_prices
from mlstack.catalog.prices_cli import run_refresh
from mlstack.errors import InputError

TODAY = dt.date(2026, 12, 1)


def _product(instance_attr: str, name: str, usd: str, published: str = "2026-11-20T18:04:11Z") -> str:
    # The aws_v1 product document GetProducts returns, one JSON string per SKU (trimmed to the fields read).
    sku = "ABCDEFGH12345678"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {instance_attr: name, "regionCode": "us-east-1", "operatingSystem": "Linux"},
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {name} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                }
            },
            "version": "20261120180411",
            **({"publicationDate": published} if published else {}),
        }
    )


EC2_FIXED = [
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
]


def _expect(stub: Stubber, code: str, attr: str, name: str, price_list: list[str]) -> None:
    fixed = EC2_FIXED if code == "AmazonEC2" else [("component", "Training")]
    pairs = [(attr, name), ("regionCode", "us-east-1"), *fixed]
    params = {
        "ServiceCode": code,
        "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in pairs],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": price_list}, params)


def _client() -> Any:
    return boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_fetch_reads_the_on_demand_hourly_rate_and_its_publication_date() -> None:
    client = _client()
    with Stubber(client) as stub:
        _expect(stub, "AmazonEC2", "instanceType", "p5.48xlarge", [_product("instanceType", "p5.48xlarge", "55.04")])
        _expect(stub, "AmazonEC2", "instanceType", "p9.unknown", [])
        rows, unanswered = fetch_prices(client, "ec2_on_demand", "us-east-1", ["p5.48xlarge", "p9.unknown"], TODAY)
        stub.assert_no_pending_responses()
    assert unanswered == ["p9.unknown"]
    assert rows == [
        {
            "instance": "p5.48xlarge",
            "region": "us-east-1",
            "usd_per_hour": 55.04,
            "source": API_SOURCE.format(offer="AmazonEC2", region="us-east-1"),
            "read": "2026-12-01",
            "as_of": "2026-11-20",
        }
    ]


def test_sagemaker_rows_are_asked_by_ml_name_and_component() -> None:
    client = _client()
    with Stubber(client) as stub:
        doc = _product("instanceName", "ml.p5.48xlarge", "63.296")
        _expect(stub, "AmazonSageMaker", "instanceName", "ml.p5.48xlarge", [doc])
        rows, _ = fetch_prices(client, "sagemaker_training", "us-east-1", ["p5.48xlarge"], TODAY)
    assert rows[0]["instance"] == "p5.48xlarge" and rows[0]["usd_per_hour"] == 63.296


def test_refresh_replaces_only_that_service_and_region_and_the_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    shutil.copy(default_path(), path)
    before = load_prices(path.read_text())
    row = {
        "instance": "p5.48xlarge",
        "region": "us-east-1",
        "usd_per_hour": 55.04,
        "source": API_SOURCE.format(offer="AmazonEC2", region="us-east-1"),
        "read": "2026-12-01",
        "as_of": "2026-11-20",
    }
    assert refresh_file(path, "ec2_on_demand", "us-east-1", [row]) == 1
    after = load_prices(path.read_text())
    east1 = [(r.instance, r.usd_per_hour, r.as_of) for r in after["ec2_on_demand"] if r.region == "us-east-1"]
    assert east1 == [("p5.48xlarge", 55.04, "2026-11-20")]
    others = [r for r in before["ec2_on_demand"] if r.region != "us-east-1"]
    assert others and [r for r in after["ec2_on_demand"] if r.region != "us-east-1"] == others  # other regions kept
    assert after["capacity_block"] == before["capacity_block"]  # other services untouched


def test_a_bad_answer_never_leaves_a_file_the_loader_refuses(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    shutil.copy(default_path(), path)
    text = path.read_text()
    bad = {
        "instance": "p5.48xlarge",
        "region": "us-east-1",
        "usd_per_hour": -1,
        "source": "x" * 20,
        "read": "2026-12-01",
    }
    with pytest.raises(Exception, match="price file is invalid"):
        refresh_file(path, "ec2_on_demand", "us-east-1", [bad])
    assert path.read_text() == text


def test_cli_run_over_the_catalog_prints_what_it_wrote_and_what_had_no_rate(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    shutil.copy(default_path(), path)

    class Fake:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def get_products(self, **kwargs: Any) -> dict[str, Any]:
            name = kwargs["Filters"][0]["Value"]
            self.asked.append(name)
            docs = [_product("instanceType", name, "1.5")] if name.startswith("p5.") else []
            return {"FormatVersion": "aws_v1", "PriceList": docs}

    fake = Fake()
    lines = run_refresh(fake, "ec2_on_demand", "us-east-1", path, TODAY)
    assert "p5.48xlarge" in fake.asked and len(fake.asked) > 20  # every catalog type is asked
    assert lines[0].startswith("ec2_on_demand us-east-1: ") and "no on-demand hourly rate" in lines[1]


def test_unknown_service_is_one_line() -> None:
    with pytest.raises(InputError, match="--service must be one of"):
        fetch_prices(_client(), "hyperpod", "us-east-1", [], TODAY)


def test_a_document_without_its_publication_date_gives_no_row() -> None:
    client = _client()
    with Stubber(client) as stub:
        _expect(stub, "AmazonEC2", "instanceType", "g5.xlarge", [_product("instanceType", "g5.xlarge", "1.006", "")])
        rows, unanswered = fetch_prices(client, "ec2_on_demand", "us-east-1", ["g5.xlarge"], TODAY)
    assert rows == [] and unanswered == ["g5.xlarge"]  # an undated rate is never written
