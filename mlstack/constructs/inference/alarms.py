"""CloudWatch alarms of a `ModelEndpoint`, each with an SNS action, so that an alarm reaches someone.

Per variant: p99 ModelLatency and Invocation5XXErrors. Async endpoints also alarm on failed invocations, failed
result uploads, failed notifications (EndpointName + VariantName), the age of the oldest queued request and a
backlog with no instance to serve it that lasts (EndpointName): the metrics SageMaker publishes for
asynchronous endpoints ("Alarms and logs for tracking metrics from asynchronous endpoints", SageMaker guide).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack.config.inference import AlarmConfig, AsyncEndpointConfig

if TYPE_CHECKING:
    from mlstack.constructs.inference.model_endpoint import ModelEndpoint

_GT = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
_GE = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


@dataclass(frozen=True)
class _Rule:
    construct_id: str
    description: str
    metric: cloudwatch.IMetric
    threshold: float
    comparison: cloudwatch.ComparisonOperator
    periods: int = 5
    datapoints: int = 3


def endpoint_alarms(endpoint: ModelEndpoint, topic: sns.ITopic | None) -> list[cloudwatch.Alarm]:
    """The endpoint's alarms, each notifying `topic` (when given)."""
    spec = endpoint.spec
    limits = spec.alarms
    rules: list[_Rule] = []
    for variant in endpoint.variant_names:
        rules += [
            _Rule(
                f"{variant}LatencyAlarm",
                f"{spec.name}/{variant}: p99 latency above {limits.latency_p99_ms:g} ms",
                endpoint.metric_model_latency(variant=variant),
                limits.latency_p99_ms * 1000,  # ModelLatency is in microseconds
                _GT,
            ),
            _Rule(
                f"{variant}ErrorsAlarm",
                f"{spec.name}/{variant}: {limits.errors_5xx}+ 5xx errors per minute",
                endpoint.metric_invocation_5xx_errors(variant=variant),
                limits.errors_5xx,
                _GE,
            ),
        ]
    if isinstance(spec, AsyncEndpointConfig):
        rules += _async_rules(endpoint, spec, limits)
    return [_alarm(endpoint, rule, topic) for rule in rules]


def _async_rules(endpoint: ModelEndpoint, spec: AsyncEndpointConfig, limits: AlarmConfig) -> list[_Rule]:
    variant = endpoint.variant_names[0]
    failures = ["InvocationFailures", "ResponseUploadFailures"]
    if spec.notifications:
        failures.append("NotificationFailures")
    rules = [
        _Rule(
            f"{name}Alarm",
            f"{spec.name}: {name} (async requests that did not complete as asked)",
            endpoint.metric(name, variant=variant, statistic="Sum"),
            1,
            _GE,
            periods=1,
            datapoints=1,
        )
        for name in failures
    ]
    oldest = limits.oldest_request_minutes
    lasting = limits.backlog_without_capacity_minutes
    rules += [
        _Rule(
            "OldestRequestAlarm",
            f"{spec.name}: a queued request has waited over {oldest:g} min",
            endpoint.endpoint_metric("ApproximateAgeOfOldestRequest", statistic="Maximum"),
            oldest * 60,
            _GT,
        ),
        _Rule(
            "BacklogWithoutCapacityAlarm",
            f"{spec.name}: requests waited with no instance for {lasting} min (scale-out from zero not working?)",
            endpoint.endpoint_metric("HasBacklogWithoutCapacity", statistic="Maximum"),
            1,
            _GE,
            periods=lasting,
            datapoints=lasting,
        ),
    ]
    return rules


def _alarm(scope: Construct, rule: _Rule, topic: sns.ITopic | None) -> cloudwatch.Alarm:
    """Breaching in `datapoints` of `periods` minutes; no data (an idle endpoint) is not an alarm."""
    alarm = cloudwatch.Alarm(
        scope,
        rule.construct_id,
        alarm_description=rule.description,
        metric=rule.metric,
        threshold=rule.threshold,
        comparison_operator=rule.comparison,
        evaluation_periods=rule.periods,
        datapoints_to_alarm=rule.datapoints,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    if topic is not None:
        alarm.add_alarm_action(cw_actions.SnsAction(topic))
    return alarm
