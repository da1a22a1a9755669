"""CloudWatch alarms of a `ModelEndpoint`, each notifying the alarm topic when one is given.

Per variant: p99 ModelLatency and Invocation5XXErrors; the endpoint's mode adds its own (async: failures, queue
age, a lasting backlog without capacity; see `serving.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

if TYPE_CHECKING:
    from mlstack.constructs.inference.endpoint_parts import EndpointParts
    from mlstack.constructs.inference.props import AlarmThresholds

GT = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
GE = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


@dataclass(frozen=True)
class AlarmRule:
    construct_id: str
    description: str
    metric: cloudwatch.IMetric
    threshold: float
    comparison: cloudwatch.ComparisonOperator
    periods: int = 5
    datapoints: int = 3


def endpoint_alarms(
    endpoint: EndpointParts,
    name: str,
    limits: AlarmThresholds,
    topic: sns.ITopic | None,
    mode_rules: Sequence[AlarmRule] = (),
) -> list[cloudwatch.Alarm]:
    """The endpoint's alarms, per variant and then the mode's (`mode_rules`, from its serving strategy), each
    notifying `topic` (when given)."""
    rules: list[AlarmRule] = []
    for variant in endpoint.variant_names:
        rules += [
            AlarmRule(
                f"{variant}LatencyAlarm",
                f"{name}/{variant}: p99 latency above {limits.latency_p99_ms:g} ms",
                endpoint.metric_model_latency(variant=variant),
                limits.latency_p99_ms * 1000,  # ModelLatency is in microseconds
                GT,
            ),
            AlarmRule(
                f"{variant}ErrorsAlarm",
                f"{name}/{variant}: {limits.errors_5xx}+ 5xx errors per minute",
                endpoint.metric_invocation_5xx_errors(variant=variant),
                limits.errors_5xx,
                GE,
            ),
        ]
    rules += mode_rules
    return [_alarm(endpoint, rule, topic) for rule in rules]


def _alarm(scope: Construct, rule: AlarmRule, topic: sns.ITopic | None) -> cloudwatch.Alarm:
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
