"""`mlstack prices refresh` for the SageMaker hosting rates and the EC2 infrastructure usage types.

Same read as `price_refresh` (boto3 `pricing` `get_products`, aws_v1 documents, read-only): SageMaker hosting rows
are asked by `instanceName` (ml.*) and `component` "Hosting" of the AmazonSageMaker offer and replace that region's
rows of `data/sagemaker_hosting_prices.yaml`; the NAT gateway hour is asked from the AmazonEC2 offer by
`productFamily` "NAT Gateway" (its `usagetype` carries a region prefix outside us-east-1, e.g.
USE2-NatGateway-Hours, so it is matched by suffix) and replaces that row of `data/infra_prices.yaml`. Every row is
dated with the price list's `publicationDate`; a document without one is not used (an undated rate never is).
Interface endpoints (offer AmazonVPC) and the EKS control plane (offer AmazonEKS) are not refreshed: their
attribute values were not verified against a real answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from mlstack.catalog.hosting_prices import PRICES_FILE as HOSTING_FILE
from mlstack.catalog.hosting_prices import load_hosting_prices
from mlstack.catalog.infra_prices import DATA_FILE as INFRA_FILE
from mlstack.catalog.infra_prices import load_infra_prices
from mlstack.catalog.price_refresh import API_SOURCE, PricingClient, documents, on_demand_rate

__all__ = [
    "INFRA_ITEMS",
    "fetch_hosting_prices",
    "fetch_infra_prices",
    "hosting_path",
    "infra_path",
    "refresh_hosting_file",
    "refresh_infra_file",
]

# id -> (item, unit, offer, TERM_MATCH filters besides regionCode, usagetype suffix, price-list unit)
INFRA_ITEMS: dict[str, tuple[str, str, str, tuple[tuple[str, str], ...], str, str]] = {
    "vpc.nat_gateway.hour": (
        "NAT gateway",
        "gateway-hour",
        "AmazonEC2",
        (("productFamily", "NAT Gateway"),),
        "NatGateway-Hours",
        "Hrs",
    ),
}


def _dated(published: str) -> str | None:
    return published[:10] if published else None


def fetch_hosting_prices(
    client: PricingClient, region: str, instances: Iterable[str], today: dt.date
) -> tuple[list[dict[str, Any]], list[str]]:
    """SageMaker hosting rows for `region` (ml.* names), and the types with no dated hourly Hosting rate."""
    rows: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for name in instances:
        ml = name if name.startswith("ml.") else f"ml.{name}"
        filters = (("instanceName", ml), ("regionCode", region), ("component", "Hosting"))
        found = [
            (usd, published)
            for doc in documents(client, "AmazonSageMaker", filters)
            if (usd := on_demand_rate(doc, "Hrs")) is not None and (published := _dated(doc.get("publicationDate", "")))
        ]
        if not found:
            unanswered.append(ml)
            continue
        usd, as_of = min(found)
        rows.append(
            {
                "instance": ml,
                "region": region,
                "usd_per_hour": usd,
                "source": API_SOURCE.format(offer="AmazonSageMaker component Hosting", region=region),
                "read": today.isoformat(),
                "as_of": as_of,
            }
        )
    return rows, unanswered


def fetch_infra_prices(client: PricingClient, region: str, today: dt.date) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of `INFRA_ITEMS` for `region` read from the API, and the ids it had no dated rate for."""
    rows: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for item_id, (item, unit, offer, fixed, suffix, api_unit) in INFRA_ITEMS.items():
        found: list[tuple[float, str]] = []
        for doc in documents(client, offer, (("regionCode", region), *fixed)):
            usage = doc.get("product", {}).get("attributes", {}).get("usagetype", "")
            usd = on_demand_rate(doc, api_unit)
            published = _dated(doc.get("publicationDate", ""))
            if usage.endswith(suffix) and usd is not None and published:
                found.append((usd, published))
        if not found:
            unanswered.append(item_id)
            continue
        usd, as_of = min(found)
        rows.append(
            {
                "id": item_id,
                "item": item,
                "unit": unit,
                "usd": usd,
                "region": region,
                "source": API_SOURCE.format(offer=f"{offer} {suffix}", region=region),
                "read": today.isoformat(),
                "as_of": as_of,
            }
        )
    return rows, unanswered


def _write(path: Path, data: dict[str, Any], check: Any) -> None:
    text = (
        "# Written by `mlstack prices refresh` (rows of one region replaced from the AWS Price List Query API).\n"
        "# The comments of the hand-written file are in git history; every row names its source and date.\n"
        + yaml.safe_dump(data, sort_keys=False, width=200)
    )
    check(text)  # validated before it is written: a bad answer never leaves a file the loader refuses
    path.write_text(text)


def refresh_hosting_file(path: Path, region: str, rows: list[dict[str, Any]]) -> int:
    """Replace `region`'s rows of the hosting price file at `path` with `rows`; returns rows written."""
    data = yaml.safe_load(path.read_text())
    kept = [r for r in data.get("prices") or [] if r.get("region") != region]
    data["prices"] = sorted([*kept, *rows], key=lambda r: (r["region"], r["instance"]))
    _write(path, data, load_hosting_prices)
    return len(rows)


def refresh_infra_file(path: Path, region: str, rows: list[dict[str, Any]]) -> int:
    """Replace the rows of `rows`' ids in `region` in the infra price file at `path`; returns rows written."""
    data = yaml.safe_load(path.read_text())
    replaced = {(r["id"], region) for r in rows}
    kept = [r for r in data.get("prices") or [] if (r.get("id"), r.get("region")) not in replaced]
    data["prices"] = sorted([*kept, *rows], key=lambda r: (r["region"], r["id"]))
    _write(path, data, load_infra_prices)
    return len(rows)


def hosting_path() -> Path:
    return Path(__file__).resolve().parent / "data" / HOSTING_FILE


def infra_path() -> Path:
    return Path(__file__).resolve().parent / "data" / INFRA_FILE
