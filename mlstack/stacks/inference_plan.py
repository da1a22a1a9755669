"""`plan_inference`: the inference part of `mlstack plan`, from the blueprint alone.

Kept apart from `InferenceStack` so that planning never imports the CDK (no jsii/Node start): nothing here
imports aws_cdk. `mlstack.stacks.inference` re-exports `plan_inference`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB, precision_bytes
from mlstack.config import BlueprintConfig
from mlstack.config.inference import (
    AsyncEndpointConfig,
    AsyncScalingConfig,
    RealtimeEndpointConfig,
    RealtimeScalingConfig,
    ServerlessEndpointConfig,
    TrafficConfig,
    VariantConfig,
)
from mlstack.plan import HOURS_PER_MONTH, Cost, Plan, Quota, Resource

STACK = "InferenceStack"
_SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600

_HOSTING_PRICE_NOTE = (
    "EC2 on-demand list price used as a stand-in: SageMaker hosting (ml.*) is billed at its own, higher rates "
    "that the catalog does not hold; re-price with the SageMaker pricing page"
)


QUOTA_CODE_UNKNOWN = "unknown"
"""SageMaker's Service Quotas codes (one per instance type and use) are not in the catalog: look the quota up by
its name in the Service Quotas console (service: Amazon SageMaker)."""


def plan_inference(config: BlueprintConfig, plan: Plan) -> None:
    """Endpoints, instances at the blueprint's traffic, $/h, $/month and $ per million requests, quotas."""
    inference = config.inference
    if inference is None:
        return
    model = inference.model
    weights_gib = model.parameters_billion * 1e9 * precision_bytes(model.precision) / GIB
    artifact = model.artifact
    where = artifact.existing_bucket or "<model-bucket>"
    plan.resources.append(Resource(STACK, "S3 bucket", "access logs (SSE-S3, TLS only, versioned)"))
    if artifact.existing_bucket is None:
        plan.resources.append(Resource(STACK, "S3 bucket", "models (project KMS key, TLS only, versioned, logged)"))
    if inference.needs_data_bucket:
        plan.resources.append(
            Resource(STACK, "S3 bucket", "data capture / async results (project KMS key, TLS only, logged)")
        )
    rows = [
        f"model: {model.parameters_billion:g}B parameters at {model.precision} = {weights_gib:,.1f} GiB of weights",
        f"artifact: s3://{where}/{artifact.key}",
        f"image: {_image(config)}",
    ]
    sections: list[tuple[str, list[str]]] = [("Inference model", rows)]
    first_quota = len(plan.quotas)
    for spec in inference.endpoints:
        sections.append(_plan_endpoint(spec, plan, weights_gib))
    # A SageMaker quota is per account and region: variants and endpoints on one instance type add up.
    plan.quotas[first_quota:] = _summed(plan.quotas[first_quota:])
    if inference.invoke_api is not None:
        plan.resources.append(
            Resource(STACK, "Lambda function URL", f"IAM auth, invokes endpoint {inference.invoke_api.endpoint}")
        )
    if any(not isinstance(e, ServerlessEndpointConfig) for e in inference.endpoints):
        plan.warnings.append(
            "inference instance prices are EC2 on-demand list prices standing in for SageMaker hosting (ml.*) rates, "
            "which are higher: re-price before deciding"
        )
    if any(isinstance(e, ServerlessEndpointConfig) for e in inference.endpoints):
        plan.warnings.append("serverless inference has no price in the catalog: its cost is left unknown")
    plan.warnings.append(
        "SageMaker quota codes are not in the catalog (code 'unknown'): find each sagemaker quota by its name in "
        "the Service Quotas console (Amazon SageMaker) and request the 'needed' value before deploying"
    )
    plan.details.setdefault("sections", []).extend(sections)
    plan.details["inference"] = [_endpoint_figures(spec) for spec in inference.endpoints]


def _summed(quotas: list[Quota]) -> list[Quota]:
    merged: dict[tuple[str, str], Quota] = {}
    for quota in quotas:
        key = (quota.service, quota.name)
        if key in merged:
            merged[key] = dataclasses.replace(merged[key], needed=merged[key].needed + quota.needed)
        else:
            merged[key] = quota
    return list(merged.values())


def _image(config: BlueprintConfig) -> str:
    assert config.inference is not None
    image = config.inference.model.image
    if image.source == "ecr":
        return f"ECR {image.repository}:{image.tag} (this account)"
    return f"{image.account}.dkr.ecr.{image.region or config.env.region}.amazonaws.com/{image.repository}:{image.tag}"


def _plan_endpoint(
    spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig, plan: Plan, weights_gib: float
) -> tuple[str, list[str]]:
    title = f"Endpoint {spec.name} ({spec.mode})"
    rows: list[str] = []
    plan.resources.append(Resource(STACK, "SageMaker endpoint", f"{spec.name}: {spec.mode}"))
    variant_count = len(spec.variants) if isinstance(spec, RealtimeEndpointConfig) else 1
    plan.resources.append(
        Resource(STACK, "CloudWatch alarm", f"{spec.name}: p99 latency and 5xx errors per variant", 2 * variant_count)
    )
    if isinstance(spec, ServerlessEndpointConfig):
        rows.append(
            f"serverless: {spec.memory_mb} MB, max concurrency {spec.max_concurrency}"
            + (f", provisioned {spec.provisioned_concurrency}" if spec.provisioned_concurrency else "")
        )
        if spec.provisioned_concurrency:
            rows.append(
                f"provisioned concurrency: {spec.provisioned_concurrency} x {spec.memory_mb} MB kept warm and billed "
                "every hour, used or not (price not in the catalog)"
            )
        if weights_gib * GIB > spec.memory_mb * 2**20:
            plan.warnings.append(
                f"{spec.name}: {weights_gib:.1f} GiB of weights do not fit in {spec.memory_mb} MB of serverless memory"
            )
        plan.costs.append(
            Cost(f"{spec.name}: serverless compute + requests", 1, None, None, "no serverless price in the catalog")
        )
        plan.quotas.append(
            Quota(
                "sagemaker",
                "Maximum total concurrency across all serverless endpoints",
                QUOTA_CODE_UNKNOWN,
                spec.max_concurrency,
            )
        )
        if spec.traffic and spec.traffic.average_duration_ms:
            gb_seconds = (
                (spec.traffic.requests_per_second * _SECONDS_PER_MONTH * spec.traffic.average_duration_ms / 1000)
                * spec.memory_mb
                / 1024
            )
            rows.append(f"compute at traffic: {gb_seconds:,.0f} GB-seconds/month (price per GB-s not in the catalog)")
        rows += _traffic_rows(spec.traffic, None, unknown="no serverless price in the catalog")
        return title, rows
    variants = spec.variants if isinstance(spec, RealtimeEndpointConfig) else [spec.variant]
    weight_total = sum(v.weight for v in variants) or 1.0
    for variant in variants:
        instance = get_instance(variant.instance_type)
        share = variant.weight / weight_total
        count, how = _instances_at_traffic(spec, variant, share)
        memory = (
            instance.accelerator.describe() if instance.accelerator else f"CPU only, {instance.memory_gib:g} GiB RAM"
        )
        rows.append(
            f"variant {variant.name}: {variant.instance_type} ({memory}), weight {share:.0%}, "
            f"{how}; local NVMe: {'yes (no KMS volume key)' if instance.has_local_nvme else 'no (KMS volume key)'}"
        )
        throughput = spec.traffic.throughput_per_instance if spec.traffic else None
        if throughput and instance.price_per_hour:
            # Price-performance independent of traffic: what a fully used instance costs per request.
            at_capacity = instance.price_per_hour / (throughput * 3600) * 1e6
            rows.append(f"  {variant.name}: ${at_capacity:,.2f} per 1M requests at full load ({throughput:g}/s)")
        available = instance.total_accelerator_memory_gib or instance.memory_gib
        if weights_gib > available:
            plan.warnings.append(
                f"{spec.name}/{variant.name}: {weights_gib:.1f} GiB of weights exceed the "
                f"{available:g} GiB of {'accelerator' if instance.accelerator else 'host'} memory of "
                f"{variant.instance_type}"
            )
        plan.resources.append(
            Resource(
                STACK, "SageMaker instance", f"{spec.name}/{variant.name}: {variant.instance_type}", math.ceil(count)
            )
        )
        plan.costs.append(
            Cost(
                f"{spec.name}/{variant.name}: {variant.instance_type} hosting (EC2 list price as proxy)",
                round(count, 3),
                instance.price_per_hour,
                instance.price_date,
                f"{instance.price_source}; {_HOSTING_PRICE_NOTE}"
                if instance.price_per_hour
                else (instance.price_note or "no price in the catalog"),
            )
        )
        peak = _peak_instances(spec, variant)
        if throughput and spec.traffic:
            needed = spec.traffic.requests_per_second * share / throughput
            if needed > peak:
                knob = "autoscaling max_instances" if _scaling(spec, variant) else "instance_count"
                plan.warnings.append(
                    f"{spec.name}/{variant.name}: the traffic needs {math.ceil(needed)} instances "
                    f"({spec.traffic.requests_per_second * share:g}/s at {throughput:g}/s each) but at most {peak} "
                    f"run; raise {knob} (the cost above is for {peak})"
                )
        plan.quotas.append(
            Quota("sagemaker", f"{variant.instance_type} for endpoint usage", QUOTA_CODE_UNKNOWN, peak, "instances")
        )
        if variant.is_neuron:
            ami = variant.ami_version or "SageMaker's default (the Neuron AMI lists Inferentia2 and Trainium only)"
            rows.append(f"  {variant.name}: Neuron host, InferenceAmiVersion {ami}")
        if instance.family == "inf1":
            plan.warnings.append(
                f"{spec.name}/{variant.name}: SageMaker deployment guardrails (blue/green canary, linear, rolling) "
                "are not available on inf1; updates go all at once"
            )

    autoscaled = [v.name for v in variants if _scaling(spec, v) is not None]
    if autoscaled:
        plan.warnings.append(
            f"{spec.name}: to change the instance type of an autoscaled variant ({', '.join(autoscaled)}), deploy once "
            "without its autoscaling, then with the new type and autoscaling (the same to remove the variant): "
            "UpdateEndpoint rejects the change while the variant is registered with Application Auto Scaling"
        )
    if isinstance(spec, AsyncEndpointConfig):
        rows.append(
            f"async: results s3://<data-bucket>/{spec.output_path}/, failures {spec.failure_prefix}/, "
            f"requests uploaded to {spec.input_path}/"
            + ("; SNS success and error topics" if spec.notifications else "")
        )
        if spec.notifications:
            plan.resources.append(Resource(STACK, "SNS topic", f"{spec.name}: success and error (KMS)", 2))
    if spec.data_capture is not None:
        rows.append(
            f"data capture: {spec.data_capture.sampling_percent}% {spec.data_capture.mode} to "
            f"s3://<data-bucket>/{spec.data_capture.prefix}/ (KMS)"
        )
    instance_hourly = _hourly(spec)
    rows += _traffic_rows(spec.traffic, instance_hourly)
    return title, rows


def _instances_at_traffic(
    spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig, share: float
) -> tuple[float, str]:
    """Average instances this variant runs at the blueprint's traffic, and how that number was reached."""
    scaling = _scaling(spec, variant)
    traffic = spec.traffic
    if scaling is None:
        return float(variant.instance_count), f"{variant.instance_count} instance(s), fixed"
    low, high = scaling.min_instances, scaling.max_instances
    if traffic is None or traffic.throughput_per_instance is None:
        start = max(low, 1) if isinstance(spec, RealtimeEndpointConfig) else low
        return float(start), f"autoscaling {low}..{high}; at its minimum (no throughput given)"
    needed = traffic.requests_per_second * share / traffic.throughput_per_instance
    if isinstance(spec, AsyncEndpointConfig) and spec.autoscaling and spec.autoscaling.scales_to_zero:
        count = min(max(needed, low), high)  # busy fraction: it scales to zero between jobs
        return count, (
            f"autoscaling {low}..{high}; {count:.2f} instances on average (scales to zero; a lower bound: each "
            "burst also pays for start-up and the scale-in delay)"
        )
    count = float(min(max(math.ceil(needed), low), high))
    return count, f"autoscaling {low}..{high}; {count:g} at traffic"


def _scaling(
    spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig
) -> RealtimeScalingConfig | AsyncScalingConfig | None:
    return variant.autoscaling if isinstance(spec, RealtimeEndpointConfig) else spec.autoscaling


def _peak_instances(spec: RealtimeEndpointConfig | AsyncEndpointConfig, variant: VariantConfig) -> int:
    scaling = _scaling(spec, variant)
    return scaling.max_instances if scaling else variant.instance_count


def _hourly(spec: RealtimeEndpointConfig | AsyncEndpointConfig) -> float | None:
    """$/h of the endpoint's instances at traffic, None when any price is unknown."""
    variants = spec.variants if isinstance(spec, RealtimeEndpointConfig) else [spec.variant]
    total_weight = sum(v.weight for v in variants) or 1.0
    total = 0.0
    for variant in variants:
        price = get_instance(variant.instance_type).price_per_hour
        if price is None:
            return None
        total += price * _instances_at_traffic(spec, variant, variant.weight / total_weight)[0]
    return total


def _traffic_rows(
    traffic: TrafficConfig | None, hourly: float | None, unknown: str = "no price for this instance type in the catalog"
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
        f"${per_million:,.2f} per 1M requests (EC2 list price as proxy for SageMaker hosting)"
    )
    return rows


def _endpoint_figures(spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig) -> dict[str, Any]:
    """Machine-readable figures for `mlstack plan --json` and the tests."""
    hourly = None if isinstance(spec, ServerlessEndpointConfig) else _hourly(spec)
    rps = spec.traffic.requests_per_second if spec.traffic else None
    return {
        "endpoint": spec.name,
        "mode": spec.mode,
        "per_hour": None if hourly is None else round(hourly, 4),
        "per_month": None if hourly is None else round(hourly * HOURS_PER_MONTH, 2),
        "per_million_requests": None if hourly is None or not rps else round(hourly / (rps * 3600) * 1e6, 4),
    }
