"""CloudWatch metrics, dashboard widgets and alarms as plain data (no CDK, no blueprint): what
`mlstack.design.observability` decides and `mlstack.constructs.training.observability` builds. It lives under
constructs/ because a construct never imports the design layer; the design imports it (it imports no CDK)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Comparison = Literal[
    "GreaterThanThreshold", "GreaterThanOrEqualToThreshold", "LessThanThreshold", "LessThanOrEqualToThreshold"
]
MissingData = Literal["breaching", "notBreaching", "ignore", "missing"]

CONTAINER_INSIGHTS = "ContainerInsights"
FSX = "AWS/FSx"
FSX_ID = "<FileSystemId>"
"""Placeholder a design's FSx metrics carry for the file system's ID (a CloudFormation reference the construct
puts in its place)."""


@dataclass(frozen=True)
class Metric:
    """One CloudWatch metric as its publisher names it."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str = "Average"
    period_s: int = 60
    label: str = ""

    @property
    def dimension_map(self) -> dict[str, str]:
        return dict(self.dimensions)


@dataclass(frozen=True)
class Widget:
    """A graph of the dashboard; `source` is the public page that names the metrics."""

    title: str
    metrics: tuple[Metric, ...]
    source: str


@dataclass(frozen=True)
class Alarm:
    """An alarm on one metric (`expression` None) or on a metric-math `expression` over `metrics` (id, metric).

    `notify_on_insufficient_data`: the topic is also told when every data point of the window is missing (the
    stalled-job alarm: no step line for the whole window). `notify` False: no action at all (an input of a
    `CompositeAlarm`, which notifies instead).
    """

    construct_id: str
    description: str
    metrics: tuple[tuple[str, Metric], ...]
    threshold: float
    comparison: Comparison
    evaluation_periods: int
    treat_missing_data: MissingData
    expression: str | None = None
    datapoints_to_alarm: int | None = None
    notify_on_insufficient_data: bool = False
    source: str = ""
    notify: bool = True

    @property
    def metric(self) -> Metric:
        return self.metrics[0][1]


@dataclass(frozen=True)
class CompositeAlarm:
    """An alarm in ALARM while every alarm `all_of` names (construct IDs of the design's alarms) is in ALARM
    (AlarmRule `ALARM(a) AND ALARM(b)`); it notifies the topic on ALARM and on OK."""

    construct_id: str
    description: str
    all_of: tuple[str, ...]
    source: str = ""


@dataclass(frozen=True)
class StepLog:
    """Where the reference script's JSON step lines (`{"step": ..., "step_time_s": ..., "tokens_per_s": ...}`,
    printed by rank 0) land in CloudWatch Logs on an engine, and how a metric filter reads them.

    `log_group_name` None: the engine's own job log group (the stack passes it); otherwise the group the stack
    creates under that name (`create`) so the filter exists before the first line does.
    """

    log_group_name: str | None
    create: bool
    field_prefix: str
    """JSON path of the parsed line in each log event: `$.` (the event is the line) or `$.log_processed.` (Fluent
    Bit puts the container's line in `log` and, parsed, in `log_processed`)."""
    conditions: tuple[str, ...] = ()
    """Further JSON conditions of the filter (the job's namespace)."""
    namespace: str = "mlstack"

    @property
    def pattern(self) -> str:
        terms = [*self.conditions, f"{self.field_prefix}step >= 1", f"{self.field_prefix}step_time_s >= 0"]
        return "{ " + " && ".join(terms) + " }"


@dataclass(frozen=True)
class StepMetric:
    """A metric filter's output: `value` is a JSON path of the line or a constant."""

    name: str
    value: str
    unit: str


@dataclass(frozen=True)
class ObservabilityDesign:
    """A training cluster's dashboard, alarms and step-line metric filters; `omitted` says, one line each, what the
    engine publishes no metric for today, and so is not on the dashboard."""

    dashboard_name: str
    widgets: tuple[Widget, ...]
    alarms: tuple[Alarm, ...]
    step_log: StepLog | None
    step_metrics: tuple[StepMetric, ...] = ()
    omitted: tuple[str, ...] = field(default=())
    host_agent: HostAgent | None = None
    composite_alarms: tuple[CompositeAlarm, ...] = ()


@dataclass(frozen=True)
class HostAgent:
    """The CloudWatch agent on an engine's own hosts (Batch container instances, HyperPod Slurm nodes): its JSON
    configuration, the namespace it publishes to (the one `cloudwatch:PutMetricData` is allowed on) and the log
    group it sends the kernel log to, where a metric filter counts the lines `xid_pattern` matches (default: every
    NVIDIA Xid line) as `xid_metric`."""

    config: str
    namespace: str
    kernel_log_group_name: str
    xid_metric: str = "GpuXidErrors"
    xid_pattern: str = '"NVRM: Xid"'
