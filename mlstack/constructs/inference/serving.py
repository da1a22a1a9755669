"""How a `EndpointParts` serves: one small strategy per endpoint mode (real-time, serverless, async).

`EndpointParts` asks its `serving` for the production variants, the async config, the autoscaling, the invoke
grant and the mode's extra alarms, and never branches on the mode itself. What each mode offers (VPC, data
capture, payload limit, invoke actions) is the shared table in `mlstack.catalog.endpoint_modes`, which the
inference plan reads too.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from aws_cdk import Duration
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns

from mlstack.catalog.endpoint_modes import ASYNC, REALTIME, SERVERLESS, EndpointMode
from mlstack.constructs.inference.alarms import GE, GT, AlarmRule
from mlstack.constructs.inference.endpoint_parts import EndpointParts
from mlstack.constructs.inference.props import (
    AlarmThresholds,
    AsyncScaling,
    DataCapture,
    ScalingMetric,
    Variant,
)

SERVERLESS_VARIANT = "AllTraffic"
"""The one production variant of a serverless endpoint."""


class Serving(Protocol):
    """What `EndpointParts` asks of its mode."""

    mode: ClassVar[EndpointMode]

    @property
    def variants(self) -> list[Variant]: ...
    @property
    def data_capture(self) -> DataCapture | None: ...
    @property
    def volume_kms_key(self) -> bool: ...
    @property
    def retains_instance_counts(self) -> bool: ...
    def production_variants(
        self, endpoint: EndpointParts
    ) -> list[sagemaker.CfnEndpointConfig.ProductionVariantProperty]: ...
    def async_config(
        self, endpoint: EndpointParts
    ) -> tuple[sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty | None, list[sns.ITopic]]:
        """The async settings (None for the other modes) and the notification topics made in `endpoint`."""
        ...

    def add_scaling(self, endpoint: EndpointParts, role: iam.IRole) -> None: ...
    def grant_invoke(self, endpoint: EndpointParts, grantee: iam.IGrantable) -> iam.Grant: ...
    def alarm_rules(self, endpoint: EndpointParts, name: str, limits: AlarmThresholds) -> list[AlarmRule]: ...


_PREDEFINED = {
    ScalingMetric.INVOCATIONS_PER_INSTANCE: appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
    ScalingMetric.CONCURRENT_REQUESTS_PER_MODEL: (
        appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION
    ),
}


def _seconds(value: Duration | None) -> int | None:
    return None if value is None else int(value.to_seconds())


def _instance_variant(
    endpoint: EndpointParts, variant: Variant
) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
    return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
        variant_name=variant.name,
        model_name=endpoint.model.attr_model_name,
        instance_type=variant.instance_type,
        initial_instance_count=variant.instance_count,
        initial_variant_weight=variant.weight,
        inference_ami_version=variant.ami_version,
        container_startup_health_check_timeout_in_seconds=_seconds(variant.startup_timeout),
        model_data_download_timeout_in_seconds=_seconds(variant.download_timeout),
        volume_size_in_gb=variant.volume_size_gb,
    )


def _invoke(endpoint: EndpointParts, grantee: iam.IGrantable, mode: EndpointMode) -> iam.Grant:
    return iam.Grant.add_to_principal(
        grantee=grantee, actions=list(mode.invoke_actions), resource_arns=[endpoint.endpoint_arn]
    )


@dataclass(frozen=True)
class RealtimeServing:
    """Real-time: one or more weighted variants on instances in the VPC; optional data capture."""

    variants: Sequence[Variant]
    data_capture: DataCapture | None = None
    """Default: none. Needs the endpoint's `data_bucket`."""
    volume_kms_key: bool = True
    """Encrypt the hosts' EBS volumes with the endpoint's key. Set False when a variant's host has local NVMe
    (SageMaker encrypts it in hardware and rejects a KmsKeyId)."""
    mode: ClassVar[EndpointMode] = REALTIME

    @property
    def retains_instance_counts(self) -> bool:
        # Not with a fixed-size variant: RetainAllVariantProperties would then ignore a changed instance_count.
        return all(v.scaling is not None for v in self.variants)

    def production_variants(
        self, endpoint: EndpointParts
    ) -> list[sagemaker.CfnEndpointConfig.ProductionVariantProperty]:
        return [_instance_variant(endpoint, v) for v in self.variants]

    def async_config(self, endpoint: EndpointParts) -> tuple[None, list[sns.ITopic]]:
        return None, []

    def add_scaling(self, endpoint: EndpointParts, role: iam.IRole) -> None:
        for variant in self.variants:
            scaling = variant.scaling
            if scaling is None:
                continue
            target = endpoint.scalable_target(
                f"{variant.name}Scaling", variant.name, role, scaling.min_instances, scaling.max_instances
            )
            concurrent = scaling.metric is ScalingMetric.CONCURRENT_REQUESTS_PER_MODEL
            target.scale_to_track_metric(
                "ConcurrentRequestsPerModel" if concurrent else "InvocationsPerInstance",
                target_value=scaling.target_value,
                predefined_metric=_PREDEFINED[scaling.metric],
                scale_in_cooldown=scaling.scale_in_cooldown,
                scale_out_cooldown=scaling.scale_out_cooldown,
            )

    def grant_invoke(self, endpoint: EndpointParts, grantee: iam.IGrantable) -> iam.Grant:
        return _invoke(endpoint, grantee, self.mode)

    def alarm_rules(self, endpoint: EndpointParts, name: str, limits: AlarmThresholds) -> list[AlarmRule]:
        return []


@dataclass(frozen=True)
class ServerlessServing:
    """Serverless: no instances, no VPC, no network isolation, no data capture (SageMaker does not offer them)."""

    memory_mb: int
    """One of 1024..6144 in steps of 1024."""
    max_concurrency: int
    provisioned_concurrency: int | None = None
    """Default: none (every request after an idle period may wait for a cold start)."""
    mode: ClassVar[EndpointMode] = SERVERLESS

    @property
    def variants(self) -> list[Variant]:
        return []

    @property
    def data_capture(self) -> None:
        return None

    @property
    def volume_kms_key(self) -> bool:
        return False

    @property
    def retains_instance_counts(self) -> bool:
        return False

    def production_variants(
        self, endpoint: EndpointParts
    ) -> list[sagemaker.CfnEndpointConfig.ProductionVariantProperty]:
        return [
            sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=SERVERLESS_VARIANT,
                model_name=endpoint.model.attr_model_name,
                serverless_config=sagemaker.CfnEndpointConfig.ServerlessConfigProperty(
                    memory_size_in_mb=self.memory_mb,
                    max_concurrency=self.max_concurrency,
                    provisioned_concurrency=self.provisioned_concurrency,
                ),
            )
        ]

    def async_config(self, endpoint: EndpointParts) -> tuple[None, list[sns.ITopic]]:
        return None, []

    def add_scaling(self, endpoint: EndpointParts, role: iam.IRole) -> None:
        return None

    def grant_invoke(self, endpoint: EndpointParts, grantee: iam.IGrantable) -> iam.Grant:
        return _invoke(endpoint, grantee, self.mode)

    def alarm_rules(self, endpoint: EndpointParts, name: str, limits: AlarmThresholds) -> list[AlarmRule]:
        return []


@dataclass(frozen=True)
class AsyncServing:
    """Async: one variant; requests uploaded to S3, results and failures written under prefixes of the endpoint's
    `data_bucket` (KMS); optional SNS success/error topics; backlog-based scaling that may go to zero."""

    variant: Variant
    output_prefix: str
    failure_prefix: str | None = None
    """Default: `<output_prefix>-failures`."""
    input_prefix: str = "async-input"
    """Where callers upload request payloads (`grant_invoke` lets them write there)."""
    notifications: bool = True
    """SNS success and error topics (KMS, TLS-only publish)."""
    max_concurrent_invocations_per_instance: int | None = None
    scaling: AsyncScaling | None = None
    data_capture: DataCapture | None = None
    volume_kms_key: bool = True
    """As for `RealtimeServing`."""
    mode: ClassVar[EndpointMode] = ASYNC

    @property
    def variants(self) -> list[Variant]:
        return [self.variant]

    @property
    def failures(self) -> str:
        return self.failure_prefix or f"{self.output_prefix}-failures"

    @property
    def retains_instance_counts(self) -> bool:
        # Not when it may sit at zero: an update then starts it at instance_count, and it scales back to zero.
        return self.scaling is not None and not self.scaling.scales_to_zero

    def production_variants(
        self, endpoint: EndpointParts
    ) -> list[sagemaker.CfnEndpointConfig.ProductionVariantProperty]:
        return [_instance_variant(endpoint, self.variant)]

    def async_config(
        self, endpoint: EndpointParts
    ) -> tuple[sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty, list[sns.ITopic]]:
        bucket = endpoint.require_data_bucket()
        endpoint.grant_write(self.output_prefix)
        endpoint.grant_write(self.failures)
        endpoint.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{self.input_prefix}/*")])
        )
        endpoint.acknowledge_prefix(self.input_prefix, "reads the request payloads callers upload under this prefix")
        notification = None
        topics: list[sns.ITopic] = []
        if self.notifications:
            success = sns.Topic(endpoint, "SuccessTopic", master_key=endpoint.key, enforce_ssl=True)
            error = sns.Topic(endpoint, "ErrorTopic", master_key=endpoint.key, enforce_ssl=True)
            topics = [success, error]
            # sns:Publish on these two topics; the key permissions SNS needs are granted with the S3 prefixes
            # (grant_publish would add kms:GenerateDataKey*).
            iam.Grant.add_to_principal(
                grantee=endpoint.role, actions=["sns:Publish"], resource_arns=[t.topic_arn for t in topics]
            )
            notification = sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
                success_topic=success.topic_arn,
                error_topic=error.topic_arn,
                include_inference_response_in=["SUCCESS_NOTIFICATION_TOPIC", "ERROR_NOTIFICATION_TOPIC"],
            )
        client = None
        if self.max_concurrent_invocations_per_instance is not None:
            client = sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                max_concurrent_invocations_per_instance=self.max_concurrent_invocations_per_instance
            )
        config = sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
            output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                s3_output_path=bucket.s3_url_for_object(self.output_prefix),
                s3_failure_path=bucket.s3_url_for_object(self.failures),
                kms_key_id=endpoint.key.key_arn,
                notification_config=notification,
            ),
            client_config=client,
        )
        return config, topics

    def add_scaling(self, endpoint: EndpointParts, role: iam.IRole) -> None:
        scaling = self.scaling
        if scaling is None:
            return
        target = endpoint.scalable_target(
            "Scaling", endpoint.variant_names[0], role, scaling.min_instances, scaling.max_instances
        )
        target.scale_to_track_metric(
            "BacklogPerInstance",
            target_value=scaling.target_backlog_per_instance,
            custom_metric=endpoint.metric_approximate_backlog_size_per_instance(),
            scale_in_cooldown=scaling.scale_in_cooldown,
            scale_out_cooldown=scaling.scale_out_cooldown,
        )
        if scaling.scales_to_zero:
            # Target tracking alone leaves the variant at zero until the backlog exceeds the target;
            # this step policy adds the first instance as soon as a request waits with no capacity.
            target.scale_on_metric(
                "ScaleOutFromZero",
                metric=endpoint.metric_has_backlog_without_capacity(),
                scaling_steps=[
                    appscaling.ScalingInterval(upper=0.5, change=0),
                    appscaling.ScalingInterval(lower=0.5, change=1),
                ],
                adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
                # No shorter than a cold start: until the first instance answers, the backlog still has no capacity.
                cooldown=Duration.seconds(
                    max(scaling.scale_out_cooldown.to_seconds(), scaling.cold_start.to_seconds())
                ),
                evaluation_periods=1,
                metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            )

    def grant_invoke(self, endpoint: EndpointParts, grantee: iam.IGrantable) -> iam.Grant:
        """InvokeEndpointAsync, plus uploading requests and reading results and failures."""
        bucket = endpoint.require_data_bucket()
        grants = [
            _invoke(endpoint, grantee, self.mode),
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:PutObject"],
                resource_arns=[bucket.arn_for_objects(f"{self.input_prefix}/*")],
            ),
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:GetObject"],
                resource_arns=[
                    bucket.arn_for_objects(f"{self.output_prefix}/*"),
                    bucket.arn_for_objects(f"{self.failures}/*"),
                ],
            ),
            iam.Grant.add_to_principal(
                grantee=grantee, actions=["kms:Decrypt", "kms:GenerateDataKey"], resource_arns=[endpoint.key.key_arn]
            ),
        ]
        return functools.reduce(lambda a, b: a.combine(b), grants)

    def alarm_rules(self, endpoint: EndpointParts, name: str, limits: AlarmThresholds) -> list[AlarmRule]:
        """Failed request downloads, invocations, result uploads and notifications; the oldest queued request; a
        lasting backlog with no instance ("Alarms and logs for tracking metrics from asynchronous endpoints",
        SageMaker guide). RequestDownloadFailures catches an input outside `input_prefix` (the role reads only
        there) or one encrypted with a key the role cannot use: the caller's first mistake."""
        variant = endpoint.variant_names[0]
        failures = ["RequestDownloadFailures", "InvocationFailures", "ResponseUploadFailures"]
        if self.notifications:
            failures.append("NotificationFailures")
        rules = [
            AlarmRule(
                f"{metric}Alarm",
                f"{name}: {metric} (async requests that did not complete as asked)",
                endpoint.metric(metric, variant=variant, statistic="Sum"),
                1,
                GE,
                periods=1,
                datapoints=1,
            )
            for metric in failures
        ]
        oldest = limits.oldest_request_minutes
        lasting = limits.backlog_without_capacity_minutes
        rules += [
            AlarmRule(
                "OldestRequestAlarm",
                f"{name}: a queued request has waited over {oldest:g} min",
                endpoint.endpoint_metric("ApproximateAgeOfOldestRequest", statistic="Maximum"),
                oldest * 60,
                GT,
            ),
            AlarmRule(
                "BacklogWithoutCapacityAlarm",
                f"{name}: requests waited with no instance for {lasting} min (scale-out from zero not working?)",
                endpoint.endpoint_metric("HasBacklogWithoutCapacity", statistic="Maximum"),
                1,
                GE,
                periods=lasting,
                datapoints=lasting,
            ),
        ]
        return rules
