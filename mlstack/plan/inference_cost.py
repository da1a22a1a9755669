"""The inference plan's traffic and cost figures: average instances at the blueprint's traffic (fixed, autoscaling,
async scale to zero), $/h at SageMaker hosting rates, and the rows and JSON figures `plan_inference` prints (no CDK
import)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlstack.catalog.hosting_prices import hosting_price
from mlstack.config.inference import (
    AsyncEndpointConfig,
    AsyncScalingConfig,
    InferenceConfig,
    RealtimeEndpointConfig,
    RealtimeScalingConfig,
    ServerlessEndpointConfig,
    TrafficConfig,
    VariantConfig,
)
from mlstack.plan.model import HOURS_PER_MONTH
from mlstack.plan.serving import variant_figures


def instances_at_traffic(
    spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig, share: float
) -> tuple[float, str]:
    """Average instances this variant runs at the blueprint's traffic, and how that number was reached."""
    scaling = variant_scaling(spec, variant)
    traffic = spec.traffic
    if scaling is None:
        return float(variant.instance_count), f"{variant.instance_count} instance(s), fixed"
    low, high = scaling.min_instances, scaling.max_instances
    if traffic is None or traffic.throughput_per_instance is None:
        start = max(low, 1) if isinstance(spec, RealtimeEndpointConfig) else low
        return float(start), f"autoscaling {low}..{high}; at its minimum (no throughput given)"
    needed = traffic.requests_per_second * share / traffic.throughput_per_instance
    if isinstance(spec, AsyncEndpointConfig) and spec.autoscaling and spec.autoscaling.scales_to_zero:
        count = min(max(scale_to_zero_instances(traffic.requests_per_second * share, spec.autoscaling), needed), high)
        return count, (
            f"autoscaling {low}..{high}; {count:.2f} instances on average: scales to zero only in gaps longer than "
            f"the {spec.autoscaling.scale_in_cooldown_seconds} s scale-in cooldown, and each scale-out bills a "
            f"{spec.autoscaling.cold_start_seconds} s cold start"
        )
    count = float(min(max(math.ceil(needed), low), high))
    return count, f"autoscaling {low}..{high}; {count:g} at traffic"


def scale_to_zero_instances(rate: float, scaling: AsyncScalingConfig) -> float:
    """Average instances of a scale-to-zero endpoint: with requests arriving at `rate` per second (Poisson), the
    instance stops only in gaps longer than the scale-in cooldown C (a fraction e^(-rate*C) of the time) and
    each restart (rate*e^(-rate*C) per second) bills a cold start. A request every 100 s with C = 600 s keeps an
    instance up 99.8% of the month."""
    down = math.exp(-rate * scaling.scale_in_cooldown_seconds)
    return min(1.0, (1 - down) + rate * down * scaling.cold_start_seconds)


def variant_scaling(
    spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig
) -> RealtimeScalingConfig | AsyncScalingConfig | None:
    return variant.autoscaling if isinstance(spec, RealtimeEndpointConfig) else spec.autoscaling


def peak_instances(spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig) -> int:
    scaling = variant_scaling(spec, variant)
    return scaling.max_instances if scaling else variant.instance_count


def endpoint_hourly(spec: RealtimeEndpointConfig | AsyncEndpointConfig, region: str) -> float | None:
    """$/h of the endpoint's instances at SageMaker hosting rates and traffic, None when any rate is unknown."""
    variants = spec.variants if isinstance(spec, RealtimeEndpointConfig) else [spec.variant]
    total_weight = sum(v.weight for v in variants) or 1.0
    total = 0.0
    for variant in variants:
        price = hosting_price(variant.instance_type, region)
        if price is None:
            return None
        total += price.usd_per_hour * instances_at_traffic(spec, variant, variant.weight / total_weight)[0]
    return total


def traffic_rows(
    traffic: TrafficConfig | None,
    hourly: float | None,
    unknown: str = "no SageMaker hosting price for this instance type in the catalog",
) -> list[str]:
    if traffic is None:
        return ["traffic: not given (no per-request cost)"]
    rows = [
        f"traffic: {traffic.requests_per_second:g} requests/s on average"
        + (f", {traffic.throughput_per_instance:g}/s per instance" if traffic.throughput_per_instance else "")
    ]
    if hourly is None:
        rows.append(f"cost: unknown ({unknown})")
        return rows
    per_million = hourly / (traffic.requests_per_second * 3600) * 1e6
    rows.append(
        f"cost at traffic: ${hourly:,.2f}/h, ${hourly * HOURS_PER_MONTH:,.0f}/month, "
        f"${per_million:,.2f} per 1M requests (SageMaker hosting rates)"
    )
    return rows


def endpoint_figures(
    spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig,
    region: str,
    inference: InferenceConfig,
    checks: Mapping[str, Path],
) -> dict[str, Any]:
    """Machine-readable figures for `mlstack plan --json` and the tests."""
    hourly = None if isinstance(spec, ServerlessEndpointConfig) else endpoint_hourly(spec, region)
    rps = spec.traffic.requests_per_second if spec.traffic else None
    return {
        "endpoint": spec.name,
        "mode": spec.mode,
        "per_hour": None if hourly is None else round(hourly, 4),
        "per_month": None if hourly is None else round(hourly * HOURS_PER_MONTH, 2),
        "per_million_requests": None if hourly is None or not rps else round(hourly / (rps * 3600) * 1e6, 4),
        "serving": {}
        if isinstance(spec, ServerlessEndpointConfig)
        else {
            v.name: f.to_json(price.usd_per_hour if (price := hosting_price(v.instance_type, region)) else None)
            for v in (spec.variants if isinstance(spec, RealtimeEndpointConfig) else [spec.variant])
            if (f := variant_figures(spec, v, inference.model, checks)) is not None
        },
    }
