"""`mlstack prices refresh`: the command-line side of `price_refresh` (needs boto3 and AWS credentials)."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import cast

from mlstack.catalog.instances import all_instances
from mlstack.catalog.price_refresh import PricingClient, default_path, fetch_prices, refresh_file
from mlstack.catalog.price_refresh_extra import (
    fetch_hosting_prices,
    fetch_infra_prices,
    hosting_path,
    infra_path,
    refresh_hosting_file,
    refresh_infra_file,
)
from mlstack.catalog.prices import Service
from mlstack.errors import InputError

__all__ = ["register"]

_SERVICES: dict[str, Service] = {"ec2": "ec2_on_demand", "sagemaker": "sagemaker_training"}
_EXTRA = ("sagemaker-hosting", "ec2-infra")
"""Services kept in their own files (SageMaker hosting rates; NAT gateway hour), refreshed by price_refresh_extra."""


def _client(profile: str | None) -> PricingClient:
    try:
        import boto3
    except ImportError:
        raise InputError("prices refresh needs boto3: pip install 'mlstack[precheck]'") from None
    # The Price List Query API is served from us-east-1 (and two other regions) whatever region is priced.
    return cast(PricingClient, boto3.Session(profile_name=profile).client("pricing", region_name="us-east-1"))


def run_refresh(client: PricingClient, service: Service, region: str, path: Path, today: dt.date) -> list[str]:
    """Refresh one service and region in the file at `path`; returns the lines to print."""
    prefix = "ml." if service == "sagemaker_training" else ""
    names = [it.name for it in all_instances()]
    rows, unanswered = fetch_prices(client, service, region, names, today)
    written = refresh_file(path, service, region, rows)
    lines = [f"{service} {region}: {written} prices written to {path} (read {today.isoformat()})"]
    if unanswered:
        lines.append(f"  no on-demand hourly rate in the price list for: {', '.join(prefix + n for n in unanswered)}")
    return lines


def run_extra_refresh(client: PricingClient, service: str, region: str, path: Path, today: dt.date) -> list[str]:
    """Refresh the SageMaker hosting rows (`sagemaker-hosting`) or the infrastructure rows (`ec2-infra`)."""
    if service == "sagemaker-hosting":
        rows, unanswered = fetch_hosting_prices(client, region, [it.name for it in all_instances()], today)
        written = refresh_hosting_file(path, region, rows)
    else:
        rows, unanswered = fetch_infra_prices(client, region, today)
        written = refresh_infra_file(path, region, rows)
    lines = [f"{service} {region}: {written} prices written to {path} (read {today.isoformat()})"]
    if unanswered:
        lines.append(f"  no dated on-demand rate in the price list for: {', '.join(unanswered)}")
    return lines


def _cmd_refresh(args: argparse.Namespace) -> int:
    if args.file and not args.service:
        raise InputError("--file needs --service (each service has its own price file)")
    client = _client(args.profile)
    today = dt.date.today()
    chosen = [args.service] if args.service else [*_SERVICES, *_EXTRA]
    for name in chosen:
        if name in _SERVICES:
            lines = run_refresh(client, _SERVICES[name], args.region, Path(args.file or default_path()), today)
        else:
            path = Path(args.file or (hosting_path() if name == "sagemaker-hosting" else infra_path()))
            lines = run_extra_refresh(client, name, args.region, path, today)
        for line in lines:
            print(line)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prices = subparsers.add_parser(
        "prices",
        help="price data: refresh it from the AWS Price List Query API (read-only, needs credentials)",
        description="Maintain the dated price data the advisor and `mlstack plan` use.",
    )
    sub = prices.add_subparsers(dest="prices_command", required=True, metavar="ACTION")
    refresh = sub.add_parser(
        "refresh",
        help="rewrite the price rows of a service and region from pricing:GetProducts",
        description="Replace the rows of one region (and service) in the price file with the API's on-demand rates, "
        "each dated with the price list's publication date.",
    )
    refresh.add_argument("--region", default="us-east-1", help="region to price (default us-east-1)")
    refresh.add_argument(
        "--service",
        choices=sorted([*_SERVICES, *_EXTRA]),
        help="one service (default: all): ec2 and sagemaker (training) rows of the training price file, "
        "sagemaker-hosting (SageMaker endpoint rates), ec2-infra (NAT gateway hour)",
    )
    refresh.add_argument("--profile", help="AWS profile for the read")
    refresh.add_argument("--file", help="price file to rewrite, with --service (default: the package's own)")
    refresh.set_defaults(handler=_cmd_refresh)
