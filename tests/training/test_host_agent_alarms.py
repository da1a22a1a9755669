"""The alarms that make a GPU host without a working CloudWatch agent loud (`agent_missing_alarms`): the
installer's own failure datapoint on every engine with the agent, and GPUs that should report and do not where an
independent count exists (Container Insights on eks and hyperpod-eks, the instance groups on hyperpod-slurm), as
the design decides them and as the templates carry them."""

from __future__ import annotations

from typing import Any

import pytest

from mlstack.config import load
from mlstack.constructs.training.metric_names import CONTAINER_INSIGHTS
from mlstack.design.host_agent_alarms import INSTALL_FAILED
from mlstack.design.observability import observability_design
from tests.synth import Session

WITH_AGENT = {
    "eks-gpu-training": "journalctl -u mlstack-host-agent",
    "eks-karpenter-training": "journalctl -u mlstack-host-agent",
    "hyperpod-eks-training": "LifecycleConfig/<group>/<instance-id>",
    "hyperpod-slurm-training": "LifecycleConfig/<group>/<instance-id>",
    "batch-training": "/var/log/cloud-init-output.log",
}


def _alarms(name: str) -> dict[str, Any]:
    return {a.construct_id: a for a in observability_design(load(name)).alarms}


@pytest.mark.parametrize(("name", "where"), sorted(WITH_AGENT.items()))
def test_a_failed_install_alarms_on_the_installers_series_and_says_where_its_output_is(name: str, where: str) -> None:
    failed = _alarms(name)["HostAgentInstallFailed"]
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in failed.metrics] == [
        ("failed", f"mlstack/{name}/hosts", INSTALL_FAILED, (), "Sum", 300)
    ]
    assert (failed.threshold, failed.comparison, failed.evaluation_periods, failed.treat_missing_data) == (
        0,
        "GreaterThanThreshold",
        1,
        "notBreaching",
    )
    assert where in failed.description and "InstanceId, Reason" in failed.description


def test_no_agent_no_agent_alarms() -> None:
    assert not any(a.startswith("HostAgent") for a in _alarms("eks-trn1-training"))


@pytest.mark.parametrize("name", ["eks-gpu-training", "eks-karpenter-training", "hyperpod-eks-training"])
def test_kubernetes_engines_compare_reporting_gpus_with_container_insights_gpu_count(name: str) -> None:
    missing = _alarms(name)["HostAgentMissing"]
    metrics = {i: (m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in missing.metrics}
    assert metrics == {
        "gpus": (CONTAINER_INSIGHTS, "node_gpu_limit", (("ClusterName", f"{name}-cluster"),), "Sum", 300),
        "reporting": (f"mlstack/{name}/hosts", "nvidia_smi_utilization_gpu", (), "SampleCount", 300),
    }
    # GPUs (per minute) that Kubernetes counts and the agents do not, over 3 x 5 minutes; no GPU node: no data, OK.
    assert missing.expression == "(FILL(gpus, 0) - FILL(reporting, 0)) / 5"
    assert (missing.comparison, missing.evaluation_periods, missing.treat_missing_data) == (
        "GreaterThanThreshold",
        3,
        "notBreaching",
    )


@pytest.mark.parametrize("name", ["eks-gpu-training", "eks-karpenter-training", "hyperpod-eks-training"])
def test_no_gpu_reporting_at_all_alarms_without_metric_math(name: str) -> None:
    """The whole fleet silent: a composite of two single-metric alarms (documented missing-data handling), not
    FILL of a series without any sample."""
    design = observability_design(load(name))
    alarms = {a.construct_id: a for a in design.alarms}
    present, none = alarms["HostAgentGpusPresent"], alarms["HostAgentNoSample"]
    assert present.expression is None and none.expression is None
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in present.metrics] == [
        ("gpus", CONTAINER_INSIGHTS, "node_gpu_limit", (("ClusterName", f"{name}-cluster"),), "Sum", 300)
    ]
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in none.metrics] == [
        ("reporting", f"mlstack/{name}/hosts", "nvidia_smi_utilization_gpu", (), "SampleCount", 300)
    ]
    rules = [(a.threshold, a.comparison, a.evaluation_periods, a.treat_missing_data) for a in (present, none)]
    assert rules == [(0, "GreaterThanThreshold", 3, "notBreaching"), (1, "LessThanThreshold", 3, "breaching")]
    assert not present.notify and not none.notify  # the composite notifies
    [composite] = design.composite_alarms
    assert (composite.construct_id, composite.all_of) == (
        "HostAgentNoneReporting",
        ("HostAgentGpusPresent", "HostAgentNoSample"),
    )


@pytest.mark.parametrize("name", ["hyperpod-slurm-training", "batch-training", "eks-trn1-training"])
def test_no_composite_alarm_without_a_container_insights_gpu_count(name: str) -> None:
    design = observability_design(load(name))
    assert design.composite_alarms == ()
    assert not {"HostAgentGpusPresent", "HostAgentNoSample"} & {a.construct_id for a in design.alarms}


def test_the_threshold_is_half_the_smallest_gpu_node() -> None:
    """One silent node always crosses it (p4d/p5: 8 GPUs; a single-GPU node: 1), a sample early or late does not."""
    config = load("eks-gpu-training")
    assert config.training is not None
    smallest = min(
        g.instance.accelerator.count
        for g in config.training.node_groups
        if g.instance.accelerator and g.instance.accelerator.vendor == "nvidia"
    )
    assert _alarms("eks-gpu-training")["HostAgentMissing"].threshold == smallest / 2


def test_slurm_compares_reporting_gpus_with_the_instance_groups() -> None:
    config = load("hyperpod-slurm-training")
    assert config.training is not None
    groups = config.training.node_groups
    gpus = sum(g.desired_size * g.instance.accelerator.count for g in groups if g.instance.accelerator)
    missing = _alarms("hyperpod-slurm-training")["HostAgentMissing"]
    assert [(i, m.name, m.statistic) for i, m in missing.metrics] == [
        ("reporting", "nvidia_smi_utilization_gpu", "SampleCount")
    ]
    assert missing.expression == f"{gpus} - FILL(reporting, 0) / 5"
    # No GPU reports at all: breaching (the cluster's groups should be running); the budget's scale-down says so.
    assert missing.treat_missing_data == "breaching"
    assert "Expected in ALARM after the first deploy until the nodes first report" in missing.description
    assert "after the budget action scaled the groups to 0" in missing.description


def test_batch_says_what_it_cannot_watch() -> None:
    design = observability_design(load("batch-training"))
    assert "HostAgentMissing" not in {a.construct_id for a in design.alarms}
    assert any("no CloudWatch metric counts the compute environment's instances" in line for line in design.omitted)


def test_templates_carry_the_agent_alarms_to_the_topic(session: Session) -> None:
    for name in WITH_AGENT:
        resources = session.blueprints[name].templates["TrainingClusterStack"]["Resources"]
        alarms = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
        topic = next(k for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic" and "AlarmTopic" in k)
        failed = next(p for k, p in alarms.items() if k.startswith("ObservabilityHostAgentInstallFailed"))
        assert failed["AlarmActions"] == [{"Ref": topic}]
        assert (failed["Namespace"], failed["MetricName"], failed["Statistic"], failed["Period"]) == (
            f"mlstack/{name}/hosts",
            INSTALL_FAILED,
            "Sum",
            300,
        )
        assert "Dimensions" not in failed
        missing = [p for k, p in alarms.items() if k.startswith("ObservabilityHostAgentMissing")]
        assert len(missing) == (0 if name == "batch-training" else 1), name
        for props in missing:
            assert props["AlarmActions"] == [{"Ref": topic}] and props["EvaluationPeriods"] == 3
            stats = {m["Id"]: m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m}
            assert stats["reporting"]["MetricName"] == "nvidia_smi_utilization_gpu"
            if "gpus" in stats:
                assert stats["gpus"]["Dimensions"] == [{"Name": "ClusterName", "Value": f"{name}-cluster"}]
        composite_type = "AWS::CloudWatch::CompositeAlarm"
        composites = {k: r["Properties"] for k, r in resources.items() if r["Type"] == composite_type}
        kubernetes = name.startswith(("eks-", "hyperpod-eks"))
        assert len(composites) == (1 if kubernetes else 0), name
        if not kubernetes:
            continue
        [(composite_id, composite)] = composites.items()
        assert composite_id.startswith("ObservabilityHostAgentNoneReporting")
        assert composite["AlarmActions"] == [{"Ref": topic}] and composite["OKActions"] == [{"Ref": topic}]
        present = next(k for k in alarms if k.startswith("ObservabilityHostAgentGpusPresent"))
        none = next(k for k in alarms if k.startswith("ObservabilityHostAgentNoSample"))
        # ALARM("<arn of GpusPresent>") AND ALARM("<arn of NoSample>")
        parts = composite["AlarmRule"]["Fn::Join"][1]
        assert {"Fn::GetAtt": [present, "Arn"]} in parts and {"Fn::GetAtt": [none, "Arn"]} in parts
        rule = "".join(p if isinstance(p, str) else f"<{p['Fn::GetAtt'][0]}>" for p in parts)
        assert rule == f'(ALARM("<{present}>") AND ALARM("<{none}>"))'
        for input_id, statistic, comparison, missing_data in (
            (present, "Sum", "GreaterThanThreshold", "notBreaching"),
            (none, "SampleCount", "LessThanThreshold", "breaching"),
        ):
            props = alarms[input_id]
            assert not {"AlarmActions", "OKActions", "InsufficientDataActions"} & set(props), input_id
            assert props.get("ActionsEnabled", True) is not False
            assert (props["Statistic"], props["ComparisonOperator"], props["TreatMissingData"]) == (
                statistic,
                comparison,
                missing_data,
            )
