"""Quotes for cost rows: the catalog's dated rate of one item in one region, or no rate and the one-line reason.

A `Quote` is (usd, date, source), in the order the plan's cost rows take them (`Cost(item, quantity, *quote)`):
a priced quote always carries its source's date; an unpriced one carries `None, None` and says why in `source`.
Prices are looked up in the blueprint's region; nothing is estimated or borrowed from another service or region.
"""

from __future__ import annotations

from typing import NamedTuple

from mlstack.catalog.infra_prices import infra_price
from mlstack.catalog.prices import Service, price

__all__ = ["FSX_UNPRICED", "Quote", "eks_control_plane_quote", "infra_quote", "instance_quote", "unpriced"]

FSX_UNPRICED = (
    "FSx for Lustre is billed per GB-month by deployment type and throughput tier; no dated rate was read "
    "(only an undated quote), so it is not priced"
)
_SERVICE_WORDS: dict[Service, str] = {
    "ec2_on_demand": "EC2 on-demand",
    "sagemaker_training": "SageMaker training",
    "hyperpod": "SageMaker HyperPod",
    "capacity_block": "Capacity Block",
}


class Quote(NamedTuple):
    usd: float | None
    """USD per unit-hour; None when no dated rate is known."""
    date: str | None
    """The date the source states the rate for (None exactly when `usd` is None)."""
    source: str
    """Where the rate comes from, or why there is none (one line)."""


def unpriced(why: str) -> Quote:
    return Quote(None, None, why)


def infra_quote(price_id: str, region: str) -> Quote:
    """The catalog's dated infrastructure rate (`data/infra_prices.yaml`; per-GB processing not included)."""
    rate = infra_price(price_id, region)
    if rate is None:
        return unpriced(f"no dated {price_id} rate for {region} in the catalog")
    return Quote(rate.usd, rate.as_of, rate.source)


def eks_control_plane_quote(support_type: str, region: str) -> Quote:
    """The EKS control plane: an EXTENDED cluster is quoted at the extended-support rate it pays once its version
    leaves standard support (the worst case)."""
    tier = "extended" if support_type == "EXTENDED" else "standard"
    return infra_quote(f"eks.cluster.{tier}.hour", region)


def instance_quote(instance: str, region: str, service: Service = "ec2_on_demand") -> Quote:
    """`instance`'s dated hourly rate for `service` in `region` (`ml.` prefix accepted), or why there is none."""
    rate = price(instance, service, region)
    if rate is None:
        return unpriced(
            f"no dated {_SERVICE_WORDS[service]} rate for {instance} in {region} in the catalog "
            "(not estimated; `mlstack prices refresh` reads it)"
        )
    return Quote(rate.usd_per_hour, rate.as_of, rate.source)
