"""`plan_inference`: the inference part of `mlstack plan`, from the blueprint alone.

Kept apart from `InferenceStack` so that planning never imports the CDK (no jsii/Node start): nothing here
imports aws_cdk.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

from mlstack.catalog import get_instance
from mlstack.catalog.endpoint_modes import endpoint_mode
from mlstack.catalog.hosting_prices import hosting_price
from mlstack.catalog.memory import GIB, precision_bytes
from mlstack.config import BlueprintConfig
from mlstack.config.inference import (
    AsyncEndpointConfig,
    InferenceConfig,
    RealtimeEndpointConfig,
    ServerlessEndpointConfig,
)
from mlstack.config.inference_fit import MAX_STARTUP_SECONDS, host_memory_warning
from mlstack.design.footprint.inference import model_endpoint
from mlstack.design.footprint.parts import ALARM
from mlstack.design.inference import inference_storage
from mlstack.plan.inference_cost import (
    endpoint_figures,
    endpoint_hourly,
    instances_at_traffic,
    peak_instances,
    traffic_rows,
    variant_scaling,
)
from mlstack.plan.model import HOURS_PER_MONTH, Cost, Plan, Quota, Resource
from mlstack.plan.serving import figure_row, variant_figures

STACK = "InferenceStack"
DATA_STACK = "DataStack"
_SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600

_NO_HOSTING_PRICE = (
    "no dated SageMaker hosting rate for {type} in {region} in the catalog (the lower EC2 rate must not stand in)"
)
NO_SERVERLESS_PRICE = (
    "billed per GB-second of memory and per request; no dated serverless rate was read (run `mlstack prices refresh`)"
)


QUOTA_CODE_UNKNOWN = "unknown"
"""SageMaker's Service Quotas codes (one per instance type and use) are not in the catalog: look the quota up by
its name in the Service Quotas console (service: Amazon SageMaker)."""


def plan_inference(config: BlueprintConfig, plan: Plan, serve_checks: Mapping[str, Path] | None = None) -> None:
    """Endpoints, instances at the blueprint's traffic, $/h, $/month and $ per million requests, quotas; for LLM
    endpoints output tokens/s and $ per million output tokens (`mlstack.plan.serving`; `serve_checks` maps an
    endpoint or `endpoint/variant` to a `mlstack serve-check` report, preferred over the estimate)."""
    inference = config.inference
    if inference is None:
        return
    checks = serve_checks or {}
    model = inference.model
    weights_gib = model.parameters_billion * 1e9 * precision_bytes(model.precision) / GIB
    artifact = model.artifact
    where = artifact.existing_bucket or "<model-bucket>"
    storage = inference_storage(inference)
    if storage.model_bucket:
        # DataStack deploys first: the artifact must be in the bucket before InferenceStack creates the model.
        plan.resources.append(
            Resource(DATA_STACK, "S3 bucket", "models (project KMS key, TLS only, versioned, logged)")
        )
        plan.resources.append(Resource(DATA_STACK, "S3 bucket", "access logs of the model bucket (SSE-S3, TLS only)"))
    if storage.image_repository is not None:
        plan.resources.append(
            Resource(DATA_STACK, "ECR repository", f"{storage.image_repository} (project KMS key, immutable)")
        )
    plan.resources.append(Resource(STACK, "S3 bucket", "access logs (SSE-S3, TLS only, versioned)"))
    plan.resources.append(Resource(STACK, "SNS topic", "alarms (project KMS key), every endpoint alarm notifies it"))
    if storage.data_bucket:
        plan.resources.append(
            Resource(STACK, "S3 bucket", "data capture / async results (project KMS key, TLS only, logged)")
        )
    rows = [
        f"model: {model.parameters_billion:g}B parameters at {model.precision} = {weights_gib:,.1f} GiB of weights",
        f"artifact: s3://{where}/{artifact.key}",
        f"image: {_image(config)}",
    ]
    if model.task is not None or "HF_TASK" in model.environment:
        rows.append(f"Hugging Face pipeline task (HF_TASK): {model.container_environment['HF_TASK']}")
    if model.precompiled_for_neuron:
        rows.append(f"Neuron graph: pre-compiled, {model.container_environment.get('OPTION_COMPILED_GRAPH_PATH')}")
    elif any(v.is_neuron for _, v in inference.hosted_variants()):
        rows.append("Neuron graph: compiled by the container at start-up (neuronx-cc); see each variant's start-up")
    sections: list[tuple[str, list[str]]] = [("Inference model", rows)]
    first_quota = len(plan.quotas)
    region = config.env.region
    for spec in inference.endpoints:
        sections.append(_plan_endpoint(spec, plan, weights_gib, region, inference, checks))
    # A SageMaker quota is per account and region: variants and endpoints on one instance type add up.
    plan.quotas[first_quota:] = _summed(plan.quotas[first_quota:])
    if inference.invoke_api is not None:
        plan.resources.append(
            Resource(STACK, "Lambda function URL", f"IAM auth, invokes endpoint {inference.invoke_api.endpoint}")
        )
    unpriced = sorted(
        {
            variant.instance_type
            for _, variant in inference.hosted_variants()
            if hosting_price(variant.instance_type, region) is None
        }
    )
    if unpriced:
        plan.warnings.append(
            f"no SageMaker hosting price in the catalog for {', '.join(unpriced)} in {region}: their cost is left "
            "unknown (EC2 rates are lower and do not stand in); read them at https://aws.amazon.com/sagemaker-ai/pricing/"
        )
    if any(isinstance(e, ServerlessEndpointConfig) for e in inference.endpoints):
        plan.warnings.append("serverless inference has no price in the catalog: its cost is left unknown")
    plan.warnings.append(
        "SageMaker quota codes are not in the catalog (code 'unknown'): find each sagemaker quota by its name in "
        "the Service Quotas console (Amazon SageMaker) and request the 'needed' value before deploying"
    )
    plan.details.setdefault("sections", []).extend(sections)
    plan.details["inference"] = [endpoint_figures(spec, region, inference, checks) for spec in inference.endpoints]


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
    account = image.registry_account(config.env.region)
    return f"{account}.dkr.ecr.{image.region or config.env.region}.amazonaws.com/{image.repository}:{image.tag}"


def _plan_endpoint(
    spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig,
    plan: Plan,
    weights_gib: float,
    region: str,
    inference: InferenceConfig,
    checks: Mapping[str, Path],
) -> tuple[str, list[str]]:
    title = f"Endpoint {spec.name} ({spec.mode})"
    mode = endpoint_mode(spec.mode)  # what the mode offers: the table ModelEndpoint reads too
    rows: list[str] = []
    plan.resources.append(Resource(STACK, "SageMaker endpoint", f"{spec.name}: {spec.mode}"))
    alarms = model_endpoint(spec)[ALARM]  # the endpoint's own footprint: per variant, the mode's, scaling's
    what = mode.variant_alarms + (
        ""
        if isinstance(spec, RealtimeEndpointConfig | ServerlessEndpointConfig)
        else "; async failures, oldest request, backlog without capacity"
    )
    plan.resources.append(Resource(STACK, "CloudWatch alarm", f"{spec.name}: {what}", alarms))
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
        plan.costs.append(Cost(f"{spec.name}: serverless compute + requests", 1, None, None, NO_SERVERLESS_PRICE))
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
        rows += traffic_rows(spec.traffic, None, unknown="no serverless price in the catalog")
        return title, rows
    variants = spec.variants if isinstance(spec, RealtimeEndpointConfig) else [spec.variant]
    weight_total = sum(v.weight for v in variants) or 1.0
    for variant in variants:
        instance = get_instance(variant.instance_type)
        price = hosting_price(variant.instance_type, region)
        share = variant.weight / weight_total
        count, how = instances_at_traffic(spec, variant, share)
        memory = (
            instance.accelerator.describe() if instance.accelerator else f"CPU only, {instance.memory_gib:g} GiB RAM"
        )
        rows.append(
            f"variant {variant.name}: {variant.instance_type} ({memory}), weight {share:.0%}, "
            f"{how}; local NVMe: {'yes (no KMS volume key)' if instance.has_local_nvme else 'no (KMS volume key)'}"
        )
        throughput = spec.traffic.throughput_per_instance if spec.traffic else None
        if throughput and price:
            # Price-performance independent of traffic: what a fully used instance costs per request.
            at_capacity = price.usd_per_hour / (throughput * 3600) * 1e6
            rows.append(f"  {variant.name}: ${at_capacity:,.2f} per 1M requests at full load ({throughput:g}/s)")
        figures = variant_figures(spec, variant, inference.model, checks)
        if figures is not None or (spec.traffic and spec.traffic.tokens):
            rows.append(figure_row(variant.name, figures, price.usd_per_hour if price else None, "SageMaker hosting"))
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
                f"{spec.name}/{variant.name}: {variant.instance_type} SageMaker hosting",
                round(count, 3),
                price.usd_per_hour if price else None,
                price.as_of if price else None,
                price.source if price else _NO_HOSTING_PRICE.format(type=variant.instance_type, region=region),
            )
        )
        scaling = variant_scaling(spec, variant)
        fleet_minimum = scaling.min_instances if scaling else variant.instance_count
        if isinstance(spec, RealtimeEndpointConfig) and fleet_minimum < 2:
            plan.warnings.append(
                f"{spec.name}/{variant.name}: runs a single {variant.instance_type} at times: no Availability Zone "
                "redundancy (SageMaker spreads instances over AZs only when there are two or more); set "
                "instance_count and autoscaling min_instances to 2 for production"
            )
        rows.append(f"  {variant.name}: host memory {instance.memory_gib:g} GiB for {weights_gib:.1f} GiB of weights")
        startup = inference.startup(variant)
        rows.append(f"  {variant.name}: start-up health check {startup.reason}")
        if startup.needed_seconds is not None and startup.needed_seconds > MAX_STARTUP_SECONDS:
            plan.warnings.append(
                f"{spec.name}/{variant.name}: start-up needs about {startup.needed_seconds} s, more than SageMaker's "
                f"{MAX_STARTUP_SECONDS} s health-check maximum: the endpoint may never become InService; "
                + (
                    "compile the model ahead of time (inference.model.neuron_compiled_graph)"
                    if variant.is_neuron and not inference.model.precompiled_for_neuron
                    else "use uncompressed artifacts (artifact.uncompressed) or a smaller precision"
                )
            )
        tight = host_memory_warning(weights_gib, variant.instance_type)
        if tight:
            plan.warnings.append(f"{spec.name}/{variant.name}: {tight}")
        peak = peak_instances(spec, variant)
        if throughput and spec.traffic:
            needed = spec.traffic.requests_per_second * share / throughput
            if needed > peak:
                knob = "autoscaling max_instances" if variant_scaling(spec, variant) else "instance_count"
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

    autoscaled = [v.name for v in variants if variant_scaling(spec, v) is not None]
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
    instance_hourly = endpoint_hourly(spec, region)
    rows += traffic_rows(spec.traffic, instance_hourly)
    return title, rows
