"""The training dashboard and alarms: on each engine only metrics its agents publish (exact names, dimensions,
thresholds), every alarm notifying the stack's topic, and metric filters that match the reference script's lines
as each engine's log pipeline delivers them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from mlstack.config import BlueprintConfig, load
from mlstack.constructs.training.metric_names import CONTAINER_INSIGHTS, FSX, FSX_ID, StepLog
from mlstack.constructs.training.observability import TrainingObservability
from mlstack.design.observability import STEP_METRICS, observability_design
from tests.synth import ROOT


def _design(name: str, **training: Any) -> Any:
    config = load(name)
    if training:
        data = config.model_dump(exclude_unset=True)
        data["training"] = {**data["training"], **training}
        config = BlueprintConfig.model_validate(data)
    return config, observability_design(config)


def _alarms(design: Any) -> dict[str, Any]:
    return {a.construct_id: a for a in design.alarms}


def test_eks_gpu_watches_container_insights_metrics_by_cluster_name() -> None:
    _, design = _design("eks-gpu-training")
    alarms = _alarms(design)
    assert sorted(alarms) == [
        "AcceleratorsIdle",
        "EfaErrors",
        "FsxFreeCapacityLow",
        "GpuErrors",
        "HostAgentGpusPresent",
        "HostAgentInstallFailed",
        "HostAgentMissing",
        "HostAgentNoSample",
        "JobStalled",
        "NodesFailed",
    ]
    assert [c.construct_id for c in design.composite_alarms] == ["HostAgentNoneReporting"]
    cluster = (("ClusterName", "eks-gpu-training-cluster"),)
    # Real utilisation from the nodes' nvidia-smi agent (tests/training/test_host_metrics_eks.py), not allocation.
    idle = alarms["AcceleratorsIdle"]
    assert [(i, m.namespace, m.name, m.dimensions) for i, m in idle.metrics] == [
        ("util", "mlstack/eks-gpu-training/hosts", "nvidia_smi_utilization_gpu", ())
    ]
    assert (idle.threshold, idle.comparison, idle.evaluation_periods) == (10, "LessThanThreshold", 12)
    efa = alarms["EfaErrors"].metric
    assert (efa.name, efa.dimensions, efa.statistic) == ("node_efa_rx_dropped", cluster, "Sum")
    assert (alarms["EfaErrors"].threshold, alarms["EfaErrors"].comparison) == (0, "GreaterThanThreshold")
    nodes = alarms["NodesFailed"].metric
    assert (nodes.namespace, nodes.name, nodes.statistic) == (
        CONTAINER_INSIGHTS,
        "cluster_failed_node_count",
        "Maximum",
    )
    names = {m.name for w in design.widgets for m in w.metrics}
    # Per-GPU DCGM metrics are not published on this cluster (its DCGM exporter is off): none is watched; the
    # allocation graph stays.
    assert not {
        n
        for n in names
        if n.startswith("node_gpu_")
        and n not in {"node_gpu_limit", "node_gpu_usage_total", "node_gpu_reserved_capacity"}
    }
    assert {"node_gpu_limit", "nvidia_smi_utilization_gpu", "nvidia_smi_power_draw", "GpuXidErrors"} <= names
    assert design.dashboard_name == "mlstack-eks-gpu-training-us-east-1"


def test_trainium_watches_neuron_monitor_metrics() -> None:
    _, design = _design("eks-trn1-training")
    alarms = _alarms(design)
    assert alarms["NeuronErrors"].metric.name == "node_neurondevice_hw_ecc_events_total"
    idle = alarms["NeuronCoresIdle"]
    assert (idle.metric.name, idle.metric.statistic, idle.threshold, idle.evaluation_periods) == (
        "node_neuroncore_utilization",
        "Average",
        10,
        12,
    )
    assert "AcceleratorsIdle" not in alarms


def test_fsx_free_capacity_alarm_is_ten_percent_of_the_blueprint_capacity() -> None:
    _, design = _design("eks-gpu-training")
    fsx = _alarms(design)["FsxFreeCapacityLow"]
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic) for i, m in fsx.metrics] == [
        ("free", FSX, "FreeDataStorageCapacity", (("FileSystemId", FSX_ID),), "Sum")
    ]
    assert fsx.expression == f"100 * free / {4800 * 1024**3}"
    assert (fsx.threshold, fsx.comparison) == (10, "LessThanThreshold")


def test_slurm_watches_the_host_agent_and_fsx_and_says_what_is_left_out() -> None:
    _, design = _design("hyperpod-slurm-training")
    assert [a.construct_id for a in design.alarms] == [
        "AcceleratorsIdle",
        "GpuErrors",
        "EfaErrors",
        "HostAgentInstallFailed",
        "HostAgentMissing",
        "FsxFreeCapacityLow",
    ]
    assert design.step_log is None
    assert any("Slurm writes job output to files" in line for line in design.omitted)
    assert any("no node-condition metric" in line for line in design.omitted)


def test_batch_reads_step_lines_from_the_job_log_group() -> None:
    _, design = _design("batch-training")
    assert sorted(_alarms(design)) == [
        "AcceleratorsIdle",
        "EfaErrors",
        "FsxFreeCapacityLow",
        "GpuErrors",
        "HostAgentInstallFailed",
        "JobStalled",
    ]
    assert design.step_log == StepLog(
        log_group_name=None, create=False, field_prefix="$.", namespace="mlstack/batch-training"
    )


def test_stalled_alarm_breaches_while_a_job_pod_runs_without_step_lines() -> None:
    # It used to be Sum(Steps) < 1 with missing data "missing": never ALARM (a Sum is >= 1 whenever it exists),
    # INSUFFICIENT_DATA 30 minutes after every normal job end, nothing for a job that hangs before its first step.
    _, design = _design("hyperpod-eks-training")
    stalled = _alarms(design)["JobStalled"]
    metrics = dict(stalled.metrics)
    assert (metrics["steps"].namespace, metrics["steps"].name, metrics["steps"].statistic) == (
        "mlstack/hyperpod-eks-training",
        "Steps",
        "Sum",
    )
    assert (metrics["pods"].namespace, metrics["pods"].name, metrics["pods"].dimension_map) == (
        "ContainerInsights",
        "namespace_number_of_running_pods",
        {"Namespace": "hyperpod-training", "ClusterName": "hyperpod-eks-training-cluster"},
    )
    assert stalled.expression == "IF(FILL(pods, 0) > 0, FILL(steps, 0), 1)"
    assert (stalled.threshold, stalled.comparison) == (1, "LessThanThreshold")
    assert (stalled.treat_missing_data, stalled.notify_on_insufficient_data, stalled.evaluation_periods) == (
        "notBreaching",
        False,
        30,
    )


def test_batch_stalled_alarm_notifies_on_insufficient_data_and_says_why() -> None:
    _, design = _design("batch-training")
    stalled = _alarms(design)["JobStalled"]
    assert (stalled.treat_missing_data, stalled.notify_on_insufficient_data) == ("missing", True)
    assert "no running-job metric" in stalled.description
    _, design = _design("hyperpod-eks-training")
    assert design.step_log is not None
    assert design.step_log.log_group_name == "/aws/containerinsights/hyperpod-eks-training-cluster/application"


# ------------------------------------------------------------------------------------ the step lines themselves


def _matches(pattern: str, event: dict[str, Any]) -> bool:
    """Evaluate the subset of the CloudWatch Logs JSON filter syntax the step filters use (`&&`, `=`, `>=`)."""
    body = pattern.strip()
    assert body.startswith("{") and body.endswith("}")
    for term in body[1:-1].split("&&"):
        m = re.fullmatch(r"\s*\$\.([\w.]+)\s*(=|>=)\s*(\"[^\"]*\"|[\d.]+)\s*", term)
        assert m, term
        path, op, literal = m.groups()
        value: Any = event
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        if op == "=":
            if value != json.loads(literal):
                return False
        elif not (isinstance(value, (int, float)) and value >= float(literal)):
            return False
    return True


def _reference_line() -> dict[str, Any]:
    """A step record with the keys the reference script prints (rank 0, `json.dumps(record)`)."""
    source = (ROOT / "runtime/workloads/train.py").read_text(encoding="utf-8")
    for key in ("step", "step_time_s", "tokens_per_s"):
        assert f'"{key}":' in source, f"runtime/workloads/train.py no longer prints {key}"
    return {"step": 12, "loss": 3.2, "step_time_s": 0.41, "tokens_per_s": 80000.0, "comm_bytes": None}


def test_eks_filter_matches_fluent_bit_events_of_the_job_namespace_only() -> None:
    _, design = _design("eks-gpu-training")
    line = _reference_line()
    event = {
        "time": "2026-12-01T10:00:00Z",
        "stream": "stdout",
        "log": json.dumps(line),
        "log_processed": line,  # kubernetes filter: Merge_Log On, Merge_Log_Key log_processed
        "kubernetes": {"namespace_name": "training", "pod_name": "smoke-node-0-0"},
    }
    assert _matches(design.step_log.pattern, event)
    assert not _matches(design.step_log.pattern, {**event, "kubernetes": {"namespace_name": "kube-system"}})
    assert not _matches(design.step_log.pattern, {**event, "log_processed": {"msg": "loading"}})


def test_batch_filter_matches_the_raw_line() -> None:
    _, design = _design("batch-training")
    line = _reference_line()
    assert _matches(design.step_log.pattern, line)
    assert not _matches(design.step_log.pattern, {"msg": "rendezvous"})


# ----------------------------------------------------------------------------------------------- the construct


def _construct(name: str, **kwargs: Any) -> tuple[dict[str, Any], TrainingObservability]:
    _, design = _design(name)
    stack = Stack(App(), "Plain")
    topic = sns.Topic(stack, "Topic")
    group = logs.LogGroup(stack, "JobLogs") if design.step_log and design.step_log.log_group_name is None else None
    built = TrainingObservability(
        stack,
        "Obs",
        dashboard_name=design.dashboard_name,
        widgets=design.widgets,
        alarms=design.alarms,
        topic=topic,
        step_log=design.step_log,
        step_metrics=design.step_metrics,
        step_log_group=group,
        file_system_id=kwargs.get("file_system_id", "fs-0123456789abcdef0"),
        key=kms.Key(stack, "Key"),
        composite_alarms=design.composite_alarms,
    )
    return Template.from_stack(stack).to_json()["Resources"], built


def test_every_alarm_notifies_the_topic_and_the_stalled_one_reads_running_pods() -> None:
    resources, _ = _construct("eks-gpu-training")
    alarms = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    topic = next(k for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic")
    assert len(alarms) == 10
    # The composite alarm's two inputs have no action; it notifies the topic.
    inputs = ("ObsHostAgentGpusPresent", "ObsHostAgentNoSample")
    for logical_id, props in alarms.items():
        assert props.get("AlarmActions") == (None if logical_id.startswith(inputs) else [{"Ref": topic}]), logical_id
    [composite] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::CompositeAlarm"]
    assert composite["AlarmActions"] == composite["OKActions"] == [{"Ref": topic}]
    stalled = next(p for k, p in alarms.items() if k.startswith("ObsJobStalled"))
    assert "InsufficientDataActions" not in stalled
    assert stalled["TreatMissingData"] == "notBreaching"
    expression = next(m for m in stalled["Metrics"] if "Expression" in m)
    assert expression["Expression"] == "IF(FILL(pods, 0) > 0, FILL(steps, 0), 1)"
    named = {m["Id"]: m["MetricStat"]["Metric"] for m in stalled["Metrics"] if "MetricStat" in m}
    assert (named["steps"]["MetricName"], named["steps"]["Namespace"]) == ("Steps", "mlstack/eks-gpu-training")
    assert named["pods"]["MetricName"] == "namespace_number_of_running_pods"
    fsx = next(p for k, p in alarms.items() if k.startswith("ObsFsxFreeCapacityLow"))
    stat = next(m for m in fsx["Metrics"] if "MetricStat" in m)["MetricStat"]["Metric"]
    assert stat["Dimensions"] == [{"Name": "FileSystemId", "Value": "fs-0123456789abcdef0"}]


def test_metric_filters_publish_the_step_metrics_from_the_created_log_group() -> None:
    resources, built = _construct("eks-gpu-training")
    assert built.shared_log_group is not None
    name = "/aws/containerinsights/eks-gpu-training-cluster/application"
    # Fluent Bit creates this group itself: an AWS::Logs::LogGroup of that name fails an update of a running
    # cluster with "already exists". A custom resource makes it ready, and every filter waits for it.
    assert not [
        r
        for r in resources.values()
        if r["Type"] == "AWS::Logs::LogGroup" and r.get("Properties", {}).get("LogGroupName") == name
    ]
    (shared_id,) = [k for k, r in resources.items() if r["Type"] == "Custom::SharedLogGroup"]
    # A new logical ID: the old AWS::Logs::LogGroup's (ObsStepLogGroup...) cannot change its type in an update.
    assert not shared_id.startswith("ObsStepLogGroup") or "Setup" in shared_id
    assert resources[shared_id]["Properties"]["LogGroupName"] == name
    assert resources[shared_id]["Properties"]["RetentionInDays"] == "365"
    for f in (r for r in resources.values() if r["Type"] == "AWS::Logs::MetricFilter"):
        assert f["Properties"]["LogGroupName"] == name
        assert shared_id in f["DependsOn"]
    filters = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Logs::MetricFilter"]
    got = {f["MetricTransformations"][0]["MetricName"]: f["MetricTransformations"][0] for f in filters}
    assert {k: (v["MetricValue"], v["Unit"], v["MetricNamespace"]) for k, v in got.items()} == {
        "StepTime": ("$.log_processed.step_time_s", "Seconds", "mlstack/eks-gpu-training"),
        "TokensPerSecond": ("$.log_processed.tokens_per_s", "Count/Second", "mlstack/eks-gpu-training"),
        "Steps": ("1", "Count", "mlstack/eks-gpu-training"),
    }
    assert len(STEP_METRICS) == 3


def test_batch_filters_read_the_given_job_log_group() -> None:
    resources, built = _construct("batch-training")
    assert built.shared_log_group is None
    job_logs = next(k for k, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup")
    filters = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Logs::MetricFilter"]
    assert {json.dumps(f["LogGroupName"]) for f in filters} == {json.dumps({"Ref": job_logs})}


def test_fsx_metrics_need_the_file_system_id() -> None:
    with pytest.raises(ValueError, match="file_system_id"):
        _construct("eks-gpu-training", file_system_id=None)


def test_eks_add_on_waits_for_the_application_log_group(session: Any) -> None:
    from tests.synth import template

    resources = template(session, "eks-gpu-training", "TrainingClusterStack").to_json()["Resources"]
    group = next(
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::SharedLogGroup"
        and r["Properties"].get("LogGroupName") == "/aws/containerinsights/eks-gpu-training-cluster/application"
    )
    addon = next(
        r
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    )
    assert group in addon["DependsOn"]


def test_diagram_lists_the_alarms_dashboard_and_budget(session: Any) -> None:
    from mlstack.diagram.__main__ import dot_sources

    sources = dot_sources(session)
    if "eks-g6e-training" not in sources:
        pytest.skip("eks-g6e-training not in MLSTACK_TEST_BLUEPRINTS")
    dot = sources["eks-g6e-training"]
    for text in (
        "CloudWatch alarms",
        "cluster_failed_node_count",
        "nvidia_smi_utilization_gpu",
        "GpuXidErrors",
        "FreeDataStorageCapacity",
        "CloudWatch dashboard\\nmlstack-eks-g6e-training-us-east-1",
        "AWS Budgets\\n5000 USD monthly\\ntag mlstack:blueprint$eks-g6e-training",
        "Log metric filters",
    ):
        assert text in dot, text


def test_plan_rows_count_the_operations_resources_of_each_template(session: Any) -> None:
    """What `mlstack plan` lists for the day-two constructs (`operations_resources`) is what the training stack
    holds, per CloudFormation type (the types only these constructs create in the training stack)."""
    from collections import Counter

    from mlstack.design.operations import operations_resources

    mine = {
        "AWS::SNS::Topic",
        "AWS::SNS::TopicPolicy",
        "AWS::SNS::Subscription",
        "AWS::CloudWatch::Dashboard",
        "AWS::CloudWatch::Alarm",
        "AWS::Logs::MetricFilter",
        "AWS::Budgets::Budget",
        "Custom::SharedLogGroup",
        # Not AWS::Events::Rule: Karpenter's interruption rules share the stack (the footprint test counts all).
    }
    for name, bp in session.blueprints.items():
        if "TrainingClusterStack" not in bp.templates:
            continue
        resources = bp.templates["TrainingClusterStack"]["Resources"].items()
        # Karpenter's interruption rules are its own (mlstack.design.footprint.elastic), not the day-two ones.
        held = Counter(r["Type"] for k, r in resources if r["Type"] in mine and not k.startswith("Karpenter"))
        planned: Counter[str] = Counter()
        for row in operations_resources(bp.config):
            if row.cfn_type in mine:
                planned[row.cfn_type] += row.count
        assert planned == held, name


def test_the_shared_log_group_handler_may_touch_only_its_group_and_the_key_through_logs(session: Any) -> None:
    """The custom resource that replaces the AWS::Logs::LogGroup (Fluent Bit creates that group itself, so an
    update of a running cluster failed with "already exists"): its role names the one group, and the project key
    only through CloudWatch Logs."""
    from tests.synth import template

    resources = template(session, "eks-gpu-training", "TrainingClusterStack").to_json()["Resources"]
    name = "/aws/containerinsights/eks-gpu-training-cluster/application"
    assert not [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::Logs::LogGroup" and r.get("Properties", {}).get("LogGroupName") == name
    ]
    (setup,) = [r for r in resources.values() if r["Type"] == "Custom::SharedLogGroup"]
    function = setup["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
    role = resources[function]["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy,) = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["Roles"] == [{"Ref": role}]
    ]
    logs_statement = next(s for s in policy if "logs:CreateLogGroup" in s["Action"])
    assert logs_statement["Action"] == ["logs:AssociateKmsKey", "logs:CreateLogGroup", "logs:PutRetentionPolicy"]
    assert [
        json.dumps(r).endswith(f':log-group:{name}"]]}}') or json.dumps(r).endswith(f':log-group:{name}:*"]]}}')
        for r in logs_statement["Resource"]
    ] == [True, True]
    kms_statement = next(s for s in policy if "kms:Decrypt" in s["Action"])
    assert kms_statement["Condition"] == {"StringEquals": {"kms:ViaService": "logs.us-east-1.amazonaws.com"}}
    assert all(not str(a).endswith("*") for s in policy for a in s["Action"])


def test_the_plan_says_how_restarts_are_bounded() -> None:
    from mlstack.plan import build_plan

    def operations(name: str) -> list[str]:
        plan = build_plan(load(ROOT / "blueprints" / f"{name}.yaml"))
        return next(rows for title, rows in plan.details["sections"] if title == "Operations")

    eks = operations("eks-gpu-training")
    assert any("job.max_retries (3) + 10 restarts of any kind" in r for r in eks)
    assert not any("without bound" in r for r in eks)
    # JobSet v0.12 (findFirstFailedPolicyRuleAndJob): rules in order, then the earliest failed Job of a rule.
    (order,) = [r for r in eks if "rules in order" in r]
    assert "a disruption (first rule: restart) outranks an application error (exit 42: fail)" in order
    assert not any("first pod to fail decides" in r for r in eks)
    assert any("main node's exit code" in r for r in operations("batch-training"))
    assert not any(r.startswith("restarts:") for r in operations("hyperpod-slurm-training"))


def test_the_shared_log_group_fails_the_deploy_within_minutes_when_its_handler_never_answers(session: Any) -> None:
    # Without ServiceTimeout CloudFormation waits an hour for a response a killed invocation never sends.
    from tests.synth import template

    resources = template(session, "eks-gpu-training", "TrainingClusterStack").to_json()["Resources"]
    (setup,) = [r for r in resources.values() if r["Type"] == "Custom::SharedLogGroup"]
    assert setup["Properties"]["ServiceTimeout"] == "300"
