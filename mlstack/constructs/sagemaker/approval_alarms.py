"""The alarms of the approval-to-deploy path, all to the caller's encrypted topic: the deploy function's errors,
dead letters, an endpoint that failed, a deployment SageMaker rolled back, and monitoring runs that found
violations or failed. Built on the ApprovalDeploy construct (same construct IDs), from its parts."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

__all__ = ["FAILED_DEPLOYMENT_PATTERN", "add_alarms"]

FAILED_DEPLOYMENT_PATTERN = '"failed-deployment"'
"""The deploy function's log line for a deployment SageMaker rolled back (a quoted term: matched anywhere)."""


def _at_least_one(
    scope: Construct, construct_id: str, description: str, metric: cloudwatch.IMetric, topic: sns.ITopic
) -> cloudwatch.Alarm:
    """An alarm on one or more of `metric` in a period (no data: not breaching), notifying `topic`."""
    alarm = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    alarm.add_alarm_action(cw_actions.SnsAction(topic))
    return alarm


def add_alarms(
    scope: Construct,
    *,
    endpoint_name: str,
    function: lambda_.IFunction,
    dead_letters: sqs.IQueue,
    log_group: logs.ILogGroup,
    schedule_arn: str,
    topic: sns.ITopic,
) -> tuple[list[cloudwatch.Alarm], events.Rule, events.Rule]:
    """(alarms, endpoint-failed rule, monitoring rule), created under `scope`."""
    alarms: list[cloudwatch.Alarm] = []
    for construct_id, description, metric in (
        ("FunctionErrorsAlarm", f"{endpoint_name} deploy function failed", function.metric_errors()),
        (
            "DeadLettersAlarm",
            f"{endpoint_name}: an approval or endpoint event was not handled (see the dead-letter queue)",
            dead_letters.metric_approximate_number_of_messages_visible(),
        ),
    ):
        alarms.append(_at_least_one(scope, construct_id, description, metric, topic))
    # A CreateEndpoint that ends Failed (container crash, capacity, health check) fires this event and no other
    # (the in-service rule never runs). Endpoint events spell the status FAILED (AWS docs: "Events that Amazon
    # SageMaker AI sends to EventBridge").
    failed_rule = events.Rule(
        scope,
        "EndpointFailedRule",
        description=f"endpoint {endpoint_name} failed",
        event_pattern=events.EventPattern(
            source=["aws.sagemaker"],
            detail_type=["SageMaker Endpoint State Change"],
            detail={"EndpointName": [endpoint_name], "EndpointStatus": ["FAILED"]},
        ),
        targets=[targets.SnsTopic(topic)],
    )
    # An UpdateEndpoint that SageMaker rolled back leaves the endpoint InService on the old version: the handler
    # logs "failed-deployment" (at ERROR) and returns normally, so the function's Errors metric stays 0.
    failed = logs.MetricFilter(
        scope,
        "FailedDeploymentFilter",
        log_group=log_group,
        filter_pattern=logs.FilterPattern.literal(FAILED_DEPLOYMENT_PATTERN),
        metric_namespace=f"mlstack/{endpoint_name}",
        metric_name="FailedDeployments",
        metric_value="1",
    )
    alarms.append(
        _at_least_one(
            scope,
            "FailedDeploymentAlarm",
            f"{endpoint_name}: a deployment did not complete (see the function's log group)",
            failed.metric(statistic="Sum", period=Duration.minutes(5)),
            topic,
        )
    )
    # A monitoring execution is a processing job whose DescribeProcessingJob names the schedule
    # (MonitoringScheduleArn); one that finds violations completes with an ExitMessage starting
    # "CompletedWithViolations" (SageMaker Developer Guide, Model Monitor "Interpret results"). The pattern
    # matches those DescribeProcessingJob fields in the processing-job state-change event's detail.
    monitoring_rule = events.Rule(
        scope,
        "MonitoringRule",
        description=f"a data-quality monitoring run of {endpoint_name} found violations or failed",
        event_pattern=events.EventPattern(
            source=["aws.sagemaker"],
            detail_type=["SageMaker Processing Job State Change"],
            detail={
                "MonitoringScheduleArn": [schedule_arn],
                "$or": [
                    {"ExitMessage": [{"prefix": "CompletedWithViolations"}]},
                    {"ProcessingJobStatus": ["Failed"]},
                ],
            },
        ),
        targets=[targets.SnsTopic(topic)],
    )
    return alarms, failed_rule, monitoring_rule
