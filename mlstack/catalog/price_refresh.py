"""`mlstack prices refresh`: rewrite the training price file from the AWS Price List Query API.

Read-only and run by hand with credentials (never at synth, never in `make test`): boto3's `pricing` client
(`get_products`, served from us-east-1) is asked, per instance type the catalog knows, for the Linux on-demand
hourly rate in one region, and the rows of that service and region in `data/training_prices.yaml` are replaced by
the answers, each dated with the price list's own `publicationDate` (`as_of`) and the day of the read (`read`).
Types the API does not answer for keep no row: a plan then says "price unknown" for them instead of guessing.
SageMaker hosting rates and the NAT gateway hour are refreshed by `price_refresh_extra` with the same calls.

Price List Query API: https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-price-list-query-api.html
(GetProducts filters: attribute names as the product's `attributes`; TERM_MATCH).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from mlstack.catalog.prices import DATA_FILE, Service, load_prices
from mlstack.errors import InputError

__all__ = ["API_SOURCE", "REFRESHABLE", "PricingClient", "documents", "fetch_prices", "on_demand_rate", "refresh_file"]

API_SOURCE = "AWS Price List Query API (pricing:GetProducts, {offer}, {region})"


class PricingClient(Protocol):
    """The one call of boto3's `pricing` client used here (a Stubber-backed client in the tests)."""

    def get_products(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class _Offer:
    service_code: str
    name_attribute: str
    prefix: str
    fixed: tuple[tuple[str, str], ...]


# The attribute values that select one Linux on-demand, shared-tenancy hourly rate per instance type; the
# SageMaker offer names its rows by `instanceName` (ml.*) and `component` (Training, Hosting, ...).
REFRESHABLE: dict[Service, _Offer] = {
    "ec2_on_demand": _Offer(
        "AmazonEC2",
        "instanceType",
        "",
        (
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("licenseModel", "No License required"),
        ),
    ),
    "sagemaker_training": _Offer("AmazonSageMaker", "instanceName", "ml.", (("component", "Training"),)),
}


def _filters(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in pairs]


def on_demand_rate(item: dict[str, Any], unit: str = "Hrs") -> float | None:
    """The USD rate per `unit` of the item's on-demand term (None when it has none, or only a zero placeholder)."""
    units = ("Hrs", "Hours", "hour") if unit == "Hrs" else (unit,)
    for term in (item.get("terms", {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if dim.get("unit") in units and usd is not None and float(usd) > 0:
                return float(usd)
    return None


def documents(client: PricingClient, service_code: str, pairs: Iterable[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    """Every aws_v1 product document GetProducts returns for the TERM_MATCH `pairs`, page after page."""
    filters = _filters(pairs)
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "ServiceCode": service_code,
            "Filters": filters,
            "FormatVersion": "aws_v1",
            "MaxResults": 100,
        }
        if token:
            kwargs["NextToken"] = token
        page = client.get_products(**kwargs)
        for text in page.get("PriceList", []):
            yield json.loads(text)
        token = page.get("NextToken")
        if not token:
            return


def fetch_prices(
    client: PricingClient, service: Service, region: str, instances: Iterable[str], today: dt.date
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows for `service` in `region` read from the API, and the instance types it had no hourly rate for."""
    if service not in REFRESHABLE:
        raise InputError(f"--service must be one of {', '.join(sorted(REFRESHABLE))}, got {service!r}")
    offer = REFRESHABLE[service]
    rows: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for instance in instances:
        pairs = [(offer.name_attribute, offer.prefix + instance), ("regionCode", region), *offer.fixed]
        rates = [
            (on_demand_rate(item), item.get("publicationDate", ""))
            for item in documents(client, offer.service_code, pairs)
        ]
        # a document without its publicationDate is not used: every row must carry the date of its rate
        found = [(usd, published) for usd, published in rates if usd is not None and published]
        if not found:
            unanswered.append(instance)
            continue
        usd, published = min(found)  # several SKUs (e.g. reserved-capacity variants): the plain on-demand one is lowest
        rows.append(
            {
                "instance": instance,
                "region": region,
                "usd_per_hour": usd,
                "source": API_SOURCE.format(offer=offer.service_code, region=region),
                "read": today.isoformat(),
                "as_of": published[:10],
            }
        )
    return rows, unanswered


def refresh_file(path: Path, service: Service, region: str, rows: list[dict[str, Any]]) -> int:
    """Replace `service`'s rows for `region` in the price file at `path` with `rows`; returns rows written.

    The file is validated before it is written, so a bad answer never leaves a file the loader refuses."""
    data = yaml.safe_load(path.read_text())
    block = data["services"].setdefault(service, {"description": service, "rows": []})
    kept = [r for r in block.get("rows") or [] if r.get("region") != region]
    block["rows"] = sorted([*kept, *rows], key=lambda r: (r["region"], r["instance"]))
    text = (
        "# Written by `mlstack prices refresh` (rows of one service and region replaced from the AWS Price List\n"
        "# Query API). The comments of the hand-written file are in git history; every row names its source.\n"
        + yaml.safe_dump(data, sort_keys=False, width=200)
    )
    load_prices(text)
    path.write_text(text)
    return len(rows)


def default_path() -> Path:
    """The package's own price file (the repository's when installed editable)."""
    return Path(__file__).resolve().parent / "data" / DATA_FILE
