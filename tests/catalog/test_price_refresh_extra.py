"""`mlstack prices refresh --service sagemaker-hosting|ec2-infra` against botocore's Stubber (aws_v1 documents)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from mlstack.catalog.hosting_prices import load_hosting_prices
from mlstack.catalog.infra_prices import load_infra_prices
from mlstack.catalog.price_refresh import API_SOURCE
from mlstack.catalog.price_refresh_extra import (
    fetch_hosting_prices,
    fetch_infra_prices,
    hosting_path,
    infra_path,
    refresh_hosting_file,
    refresh_infra_file,
)
from mlstack.catalog.prices_cli import run_extra_refresh

TODAY = dt.date(2026, 12, 1)


def _doc(family: str, attributes: dict[str, str], unit: str, usd: str, published: str | None) -> str:
    # One GetProducts aws_v1 product document (a JSON string per SKU), trimmed to the fields the refresh reads.
    sku = "M2YSHUBETB3JX4M4"
    doc: dict[str, Any] = {
        "product": {"productFamily": family, "attributes": attributes, "sku": sku},
        "serviceCode": attributes["servicecode"],
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": unit,
                            "endRange": "Inf",
                            "description": f"${usd} per {unit}",
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
    }
    if published:
        doc["publicationDate"] = published
    return json.dumps(doc)


def _hosting(name: str, usd: str, published: str | None = "2026-11-20T18:04:11Z") -> str:
    attributes = {
        "servicecode": "AmazonSageMaker",
        "instanceName": name,
        "component": "Hosting",
        "regionCode": "us-east-1",
        "location": "US East (N. Virginia)",
        "usagetype": f"USE1-Host:{name}",
        "operation": "RunInstance",
    }
    return _doc("ML Instance", attributes, "Hrs", usd, published)


def _nat(usage: str, unit: str, usd: str, region: str = "us-east-2") -> str:
    attributes = {
        "servicecode": "AmazonEC2",
        "location": "US East (Ohio)",
        "locationType": "AWS Region",
        "group": "NGW:NatGateway",
        "groupDescription": "Hourly charge for NAT Gateways" if unit == "Hrs" else "Charge for per GB data processed",
        "usagetype": usage,
        "operation": "NatGateway",
        "regionCode": region,
        "servicename": "Amazon Elastic Compute Cloud",
    }
    return _doc("NAT Gateway", attributes, unit, usd, "2026-11-20T18:04:11Z")


def _expect(stub: Stubber, code: str, pairs: list[tuple[str, str]], docs: list[str]) -> None:
    params = {
        "ServiceCode": code,
        "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in pairs],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": docs}, params)


def _client() -> Any:
    return boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_hosting_rates_are_asked_by_ml_name_and_the_hosting_component_and_dated() -> None:
    client = _client()
    with Stubber(client) as stub:
        hosting = [("instanceName", "ml.c7g.xlarge"), ("regionCode", "us-east-1"), ("component", "Hosting")]
        _expect(stub, "AmazonSageMaker", hosting, [_hosting("ml.c7g.xlarge", "0.2030000000")])
        undated = [("instanceName", "ml.inf2.8xlarge"), ("regionCode", "us-east-1"), ("component", "Hosting")]
        _expect(stub, "AmazonSageMaker", undated, [_hosting("ml.inf2.8xlarge", "2.36", published=None)])
        rows, unanswered = fetch_hosting_prices(client, "us-east-1", ["c7g.xlarge", "inf2.8xlarge"], TODAY)
        stub.assert_no_pending_responses()
    assert rows == [
        {
            "instance": "ml.c7g.xlarge",
            "region": "us-east-1",
            "usd_per_hour": 0.203,
            "source": API_SOURCE.format(offer="AmazonSageMaker component Hosting", region="us-east-1"),
            "read": "2026-12-01",
            "as_of": "2026-11-20",
        }
    ]
    assert unanswered == ["ml.inf2.8xlarge"]  # a document without its publicationDate is not used


def test_nat_gateway_hour_is_read_by_family_and_usage_type_suffix() -> None:
    client = _client()
    with Stubber(client) as stub:
        docs = [_nat("USE2-NatGateway-Bytes", "GB", "0.045"), _nat("USE2-NatGateway-Hours", "Hrs", "0.0450000000")]
        _expect(stub, "AmazonEC2", [("regionCode", "us-east-2"), ("productFamily", "NAT Gateway")], docs)
        rows, unanswered = fetch_infra_prices(client, "us-east-2", TODAY)
        stub.assert_no_pending_responses()
    assert unanswered == []
    assert rows == [
        {
            "id": "vpc.nat_gateway.hour",
            "item": "NAT gateway",
            "unit": "gateway-hour",
            "usd": 0.045,
            "region": "us-east-2",
            "source": API_SOURCE.format(offer="AmazonEC2 NatGateway-Hours", region="us-east-2"),
            "read": "2026-12-01",
            "as_of": "2026-11-20",
        }
    ]


def test_refresh_rewrites_one_region_and_the_files_still_load(tmp_path: Path) -> None:
    hosting, infra = tmp_path / "hosting.yaml", tmp_path / "infra.yaml"
    shutil.copy(hosting_path(), hosting)
    shutil.copy(infra_path(), infra)
    row = {
        "instance": "ml.c7g.xlarge",
        "region": "us-east-1",
        "usd_per_hour": 0.203,
        "source": API_SOURCE.format(offer="AmazonSageMaker component Hosting", region="us-east-1"),
        "read": "2026-12-01",
        "as_of": "2026-11-20",
    }
    assert refresh_hosting_file(hosting, "us-east-1", [row]) == 1
    assert list(load_hosting_prices(hosting.read_text())) == [("ml.c7g.xlarge", "us-east-1")]
    before = load_infra_prices(infra.read_text())
    nat = {**before[("vpc.nat_gateway.hour", "us-east-1")].model_dump(), "usd": 0.05, "as_of": "2026-11-20"}
    assert refresh_infra_file(infra, "us-east-1", [nat]) == 1
    after = load_infra_prices(infra.read_text())
    assert after[("vpc.nat_gateway.hour", "us-east-1")].usd == 0.05
    assert after[("eks.cluster.standard.hour", "us-east-1")] == before[("eks.cluster.standard.hour", "us-east-1")]


def test_an_undated_row_never_reaches_the_file(tmp_path: Path) -> None:
    infra = tmp_path / "infra.yaml"
    shutil.copy(infra_path(), infra)
    text = infra.read_text()
    row = {"id": "vpc.nat_gateway.hour", "item": "NAT gateway", "unit": "gateway-hour", "usd": 0.05}
    row |= {"region": "us-east-1", "source": "x" * 20, "read": "2026-12-01"}
    with pytest.raises(Exception, match="as_of"):
        refresh_infra_file(infra, "us-east-1", [row])
    assert infra.read_text() == text


def test_cli_extra_services_print_what_they_wrote(tmp_path: Path) -> None:
    infra = tmp_path / "infra.yaml"
    shutil.copy(infra_path(), infra)

    class Fake:
        def get_products(self, **kwargs: Any) -> dict[str, Any]:
            return {"FormatVersion": "aws_v1", "PriceList": [_nat("NatGateway-Hours", "Hrs", "0.045", "us-east-1")]}

    lines = run_extra_refresh(Fake(), "ec2-infra", "us-east-1", infra, TODAY)
    assert lines == [f"ec2-infra us-east-1: 1 prices written to {infra} (read 2026-12-01)"]


def test_file_needs_a_service(capsys: pytest.CaptureFixture[str]) -> None:
    from mlstack.cli import main

    assert main(["prices", "refresh", "--file", "x.yaml"]) != 0  # refused before any AWS call
    assert "error: --file needs --service (each service has its own price file)" in capsys.readouterr().err
