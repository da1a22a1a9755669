"""Blueprint `inference.endpoints` entries -> `ModelEndpoint` props: the one place that maps the schema's modes
onto the construct's serving strategies (start-up limits sized from the weights, the host AMI from the image)."""

from __future__ import annotations

from aws_cdk import Duration

from mlstack.config.inference import (
    AsyncEndpointConfig,
    DataCaptureConfig,
    InferenceConfig,
    RealtimeEndpointConfig,
    ServerlessEndpointConfig,
    VariantConfig,
)
from mlstack.constructs.inference import (
    AsyncScaling,
    AsyncServing,
    CaptureMode,
    DataCapture,
    RealtimeServing,
    ScalingMetric,
    ServerlessServing,
    Variant,
    VariantScaling,
)

_METRICS = {
    "invocations": ScalingMetric.INVOCATIONS_PER_INSTANCE,
    "concurrent_requests": ScalingMetric.CONCURRENT_REQUESTS_PER_MODEL,
}


def serving_props(
    spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig,
    config: InferenceConfig,
    weights: float,
) -> RealtimeServing | ServerlessServing | AsyncServing:
    if isinstance(spec, ServerlessEndpointConfig):
        return ServerlessServing(
            memory_mb=spec.memory_mb,
            max_concurrency=spec.max_concurrency,
            provisioned_concurrency=spec.provisioned_concurrency,
        )
    if isinstance(spec, RealtimeEndpointConfig):
        return RealtimeServing(
            variants=[_variant(v, config, weights) for v in spec.variants],
            data_capture=_capture(spec.data_capture),
            volume_kms_key=spec.uses_volume_key,
        )
    scaling = spec.autoscaling
    return AsyncServing(
        variant=_variant(spec.variant, config, weights),
        output_prefix=spec.output_path or "",
        failure_prefix=spec.failure_prefix,
        input_prefix=spec.input_path,
        notifications=spec.notifications,
        max_concurrent_invocations_per_instance=spec.max_concurrent_invocations_per_instance,
        scaling=None
        if scaling is None
        else AsyncScaling(
            min_instances=scaling.min_instances,
            max_instances=scaling.max_instances,
            target_backlog_per_instance=scaling.target_backlog_per_instance,
            scale_in_cooldown=Duration.seconds(scaling.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(scaling.scale_out_cooldown_seconds),
            cold_start=Duration.seconds(scaling.cold_start_seconds),
        ),
        data_capture=_capture(spec.data_capture),
        volume_kms_key=spec.uses_volume_key,
    )


def _seconds(value: int | None) -> Duration | None:
    return None if value is None else Duration.seconds(value)


def _variant(variant: VariantConfig, config: InferenceConfig, weights: float) -> Variant:
    # Start-up limits sized from the weights (and a Neuron compile at start-up) unless the blueprint sets them.
    limits = config.startup(variant)
    scaling = variant.autoscaling
    return Variant(
        instance_type=variant.instance_type,
        name=variant.name,
        instance_count=variant.instance_count,
        weight=variant.weight,
        ami_version=config.host_ami(variant),
        startup_timeout=_seconds(limits.startup_timeout_seconds),
        download_timeout=_seconds(limits.download_timeout_seconds),
        volume_size_gb=limits.volume_size_gb,
        scaling=None
        if scaling is None
        else VariantScaling(
            min_instances=scaling.min_instances,
            max_instances=scaling.max_instances,
            target_value=scaling.target_value,
            metric=_METRICS[scaling.metric],
            scale_in_cooldown=Duration.seconds(scaling.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(scaling.scale_out_cooldown_seconds),
        ),
    )


def _capture(capture: DataCaptureConfig | None) -> DataCapture | None:
    if capture is None:
        return None
    return DataCapture(sampling_percent=capture.sampling_percent, mode=CaptureMode(capture.mode), prefix=capture.prefix)
