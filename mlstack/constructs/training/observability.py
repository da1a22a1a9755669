"""`TrainingObservability`: a training cluster's CloudWatch dashboard, its alarms (every one notifies the stack's
topic) and the metric filters that turn the reference script's JSON step lines into step metrics."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack.constructs.network.ml_vpc import retention
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.training.metric_names import (
    FSX_ID,
    Alarm,
    CompositeAlarm,
    HostAgent,
    Metric,
    StepLog,
    StepMetric,
    Widget,
)
from mlstack.constructs.training.shared_log_group import SharedLogGroup


class TrainingObservability(Construct):
    """Dashboard `dashboard_name` with `widgets` (and an alarm-status row), one CloudWatch alarm per `alarms` entry
    with `topic` as its alarm (and, where asked, insufficient-data) action, and one metric filter per `step_metrics`
    entry on the step-line log group.

    An alarm whose spec says `notify=False` has no action: a composite alarm of `composite_alarms` (()) reads it
    and notifies `topic` on ALARM and OK (CloudFormation AWS::CloudWatch::CompositeAlarm; AlarmRule syntax:
    CloudWatch API Reference, PutCompositeAlarm), and the dashboard's status row shows the composite, not it.

    Props (keyword; defaults in parentheses): `dashboard_name`, `widgets`, `alarms`, `topic` (required);
    `step_log` (None: no metric filters), `step_metrics` (()), `step_log_group` (the engine's own job log group,
    when `step_log.log_group_name` is None), `file_system_id` (the FSx file system's ID for metrics whose
    FileSystemId is `FSX_ID`), `key` and `log_retention_days` (365) for a log group this construct makes ready
    (`step_log.create`: a `SharedLogGroup`, since Fluent Bit may have created it first), `removal_policy`
    (`RETAINED`, that custom resource's handler log group and the kernel-log group); `host_agent` (None): the
    CloudWatch agent of the engine's own hosts, for which this creates the kernel-log group (`key`, retention) and
    the metric filter counting its NVIDIA Xid lines.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dashboard_name: str,
        widgets: Sequence[Widget],
        alarms: Sequence[Alarm],
        topic: sns.ITopic,
        step_log: StepLog | None = None,
        step_metrics: Sequence[StepMetric] = (),
        step_log_group: logs.ILogGroup | None = None,
        file_system_id: str | None = None,
        key: kms.IKey | None = None,
        log_retention_days: int = 365,
        removal_policy: RemovalPolicy = RETAINED,
        host_agent: HostAgent | None = None,
        composite_alarms: Sequence[CompositeAlarm] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self._file_system_id = file_system_id
        self.log_group: logs.ILogGroup | None = None
        self.shared_log_group: SharedLogGroup | None = None
        self.metric_filters: list[logs.MetricFilter] = []
        if step_log is not None:
            self.log_group = self._step_log_group(step_log, step_log_group, key, log_retention_days, removal_policy)
            for metric in step_metrics:
                value = metric.value if metric.value.isdigit() else f"{step_log.field_prefix}{metric.value}"
                self.metric_filters.append(
                    logs.MetricFilter(
                        self,
                        f"{metric.name}Filter",
                        log_group=self.log_group,
                        filter_pattern=logs.FilterPattern.literal(step_log.pattern),
                        metric_namespace=step_log.namespace,
                        metric_name=metric.name,
                        metric_value=value,
                        unit=_UNITS[metric.unit],
                    )
                )
                if self.shared_log_group is not None:
                    # A metric filter on a group that does not exist yet fails: wait for the custom resource.
                    self.metric_filters[-1].node.add_dependency(self.shared_log_group.resource)
        self.host_log_group: logs.LogGroup | None = None
        if host_agent is not None:
            if key is None:
                raise ValueError("host_agent needs key (the KMS key the kernel-log group is encrypted with)")
            # Created by the stack, not by the agent (its hosts may not create groups): it must exist before the
            # first node boots, and it keeps a key and a retention.
            self.host_log_group = logs.LogGroup(
                self,
                "HostKernelLog",
                log_group_name=host_agent.kernel_log_group_name,
                encryption_key=key,
                retention=retention(log_retention_days),
                removal_policy=removal_policy,
            )
            self.metric_filters.append(
                logs.MetricFilter(
                    self,
                    "GpuXidFilter",
                    log_group=self.host_log_group,
                    filter_pattern=logs.FilterPattern.literal(host_agent.xid_pattern),
                    metric_namespace=host_agent.namespace,
                    metric_name=host_agent.xid_metric,
                    metric_value="1",
                    unit=cloudwatch.Unit.COUNT,
                )
            )
        action = cw_actions.SnsAction(topic)
        self.alarms: list[cloudwatch.Alarm] = []
        shown: list[cloudwatch.IAlarm] = []
        by_id: dict[str, cloudwatch.Alarm] = {}
        for spec in alarms:
            alarm = cloudwatch.Alarm(
                self,
                spec.construct_id,
                alarm_description=spec.description,
                metric=self._alarm_metric(spec),
                threshold=spec.threshold,
                comparison_operator=_COMPARISONS[spec.comparison],
                evaluation_periods=spec.evaluation_periods,
                datapoints_to_alarm=spec.datapoints_to_alarm,
                treat_missing_data=_MISSING[spec.treat_missing_data],
            )
            by_id[spec.construct_id] = alarm
            self.alarms.append(alarm)
            if not spec.notify:
                # Control Tower CT.CLOUDWATCH.PR.1 asks each alarm for an action: this one's state is an input.
                skip_guard(
                    alarm,
                    {
                        "CT.CLOUDWATCH.PR.1": "no action by design: a composite alarm of this construct reads its "
                        "state and notifies the alarm topic (the gate test_every_alarm_notifies_someone checks it)"
                    },
                )
                continue
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            if spec.notify_on_insufficient_data:
                alarm.add_insufficient_data_action(action)
            shown.append(alarm)
        self.composite_alarms: list[cloudwatch.CompositeAlarm] = []
        for composite in composite_alarms:
            unknown = [i for i in composite.all_of if i not in by_id]
            if unknown:
                raise ValueError(f"composite alarm {composite.construct_id} reads unknown alarms {unknown}")
            made = cloudwatch.CompositeAlarm(
                self,
                composite.construct_id,
                alarm_description=composite.description,
                # ALARM("<arn>") AND ALARM("<arn>"): the ARNs make CloudFormation create the inputs first.
                alarm_rule=cloudwatch.AlarmRule.all_of(
                    *(cloudwatch.AlarmRule.from_alarm(by_id[i], cloudwatch.AlarmState.ALARM) for i in composite.all_of)
                ),
            )
            made.add_alarm_action(action)
            made.add_ok_action(action)
            self.composite_alarms.append(made)
            shown.append(made)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name)
        graphs: list[cloudwatch.IWidget] = [
            cloudwatch.GraphWidget(title=w.title, left=[self._metric(m) for m in w.metrics], width=12, height=6)
            for w in widgets
        ]
        if shown:
            graphs.insert(0, cloudwatch.AlarmStatusWidget(title="Alarms", alarms=shown, width=24, height=3))
        self.dashboard.add_widgets(*graphs)

    def _step_log_group(
        self,
        step_log: StepLog,
        given: logs.ILogGroup | None,
        key: kms.IKey | None,
        retention_days: int,
        removal_policy: RemovalPolicy,
    ) -> logs.ILogGroup:
        if step_log.log_group_name is None:
            if given is None:
                raise ValueError("step_log names no log group: pass step_log_group (the engine's job log group)")
            return given
        if not step_log.create:
            return logs.LogGroup.from_log_group_name(self, "StepLogGroup", step_log.log_group_name)
        if key is None:
            raise ValueError("step_log.create needs key (the KMS key the log group is encrypted with)")
        # Made ready before the agent that writes to it (a metric filter needs its group), and idempotently: on a
        # cluster that already runs the add-on, Fluent Bit created the group (no retention, no key), and an
        # AWS::Logs::LogGroup of that name would fail the update with "already exists".
        self.shared_log_group = SharedLogGroup(
            self,
            "StepLogGroup",
            log_group_name=step_log.log_group_name,
            key=key,
            retention_days=retention_days,
            removal_policy=removal_policy,
        )
        return self.shared_log_group.log_group

    def _metric(self, spec: Metric) -> cloudwatch.Metric:
        dimensions = {
            name: (self._file_system_id or value) if value == FSX_ID else value for name, value in spec.dimensions
        }
        if FSX_ID in spec.dimension_map.values() and self._file_system_id is None:
            raise ValueError(f"metric {spec.name} needs the file system's ID: pass file_system_id")
        return cloudwatch.Metric(
            namespace=spec.namespace,
            metric_name=spec.name,
            dimensions_map=dimensions or None,
            statistic=spec.statistic,
            period=_seconds(spec.period_s),
            label=spec.label or None,
        )

    def _alarm_metric(self, spec: Alarm) -> cloudwatch.IMetric:
        if spec.expression is None:
            return self._metric(spec.metric)
        return cloudwatch.MathExpression(
            expression=spec.expression,
            using_metrics={name: self._metric(m) for name, m in spec.metrics},
            period=_seconds(spec.metric.period_s),
            label=spec.construct_id,
        )


@cache
def _seconds(seconds: int) -> Duration:
    """One Duration per period for the process: an immutable value, and each new one is a round trip to the jsii
    kernel (a training stack's dashboard and alarms ask for a few periods about 35 times)."""
    return Duration.seconds(seconds)


_COMPARISONS = {
    "GreaterThanThreshold": cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    "GreaterThanOrEqualToThreshold": cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    "LessThanThreshold": cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
    "LessThanOrEqualToThreshold": cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
}
_MISSING = {
    "breaching": cloudwatch.TreatMissingData.BREACHING,
    "notBreaching": cloudwatch.TreatMissingData.NOT_BREACHING,
    "ignore": cloudwatch.TreatMissingData.IGNORE,
    "missing": cloudwatch.TreatMissingData.MISSING,
}
_UNITS = {
    "Seconds": cloudwatch.Unit.SECONDS,
    "Count/Second": cloudwatch.Unit.COUNT_PER_SECOND,
    "Count": cloudwatch.Unit.COUNT,
}
