"""`mlstack plan hyperpod-eks-teams`: task governance and autoscaling rows with their CloudFormation types, $/h per
team quota and from 0 nodes to max_size (HyperPod rates: unpriced offline, with the reason, never the EC2 rate), and
the SageMaker quota at max_size."""

from __future__ import annotations

import datetime as dt

from mlstack import config as blueprint_config
from mlstack.plan import build_plan
from mlstack.plan.model import Plan

DAY = dt.date(2026, 12, 1)


def _plan() -> Plan:
    return build_plan(blueprint_config.load("hyperpod-eks-teams"), today=DAY)


def _section(plan: Plan, title: str) -> list[str]:
    return next(rows for name, rows in plan.details["sections"] if name == title)


def test_rows_have_their_cloudformation_types() -> None:
    rows = {(r.kind, r.type, r.count) for r in _plan().resources if not r.supporting}
    assert ("EKS add-on", "AWS::EKS::Addon", 1) in rows
    assert ("HyperPod cluster policy", "AWS::SageMaker::ClusterSchedulerConfig", 1) in rows
    assert ("HyperPod compute allocation", "AWS::SageMaker::ComputeQuota", 2) in rows
    assert ("HyperPod pools", "Custom::AWSCDK-EKS-KubernetesResource", 1) in rows


def test_team_quota_and_autoscaling_prices() -> None:
    plan = _plan()
    (research,) = [r for r in _section(plan, "HyperPod task governance") if r.startswith("research:")]
    assert "16 accelerators, 344 vCPU, 3276 GiB of ml.p5.48xlarge (borrow up to 8, LendAndBorrow)" in research
    assert "queue hyperpod-ns-research/hyperpod-ns-research-localqueue" in research
    assert "quota in use (2 nodes) not priced offline (no dated SageMaker HyperPod rate" in research
    (p5,) = [r for r in _section(plan, "HyperPod autoscaling") if r.startswith("p5:")]
    assert "0 to 4 nodes; $/h min $0.00, max not priced offline" in p5
    assert "$55.04" not in p5  # never the EC2 rate of p5.48xlarge
    # consolidateAfter's cost window: the nodes a finished job leaves stay 30 minutes.
    (idle,) = [r for r in _section(plan, "HyperPod autoscaling") if r.startswith("p5 idle")]
    assert "up to 4 nodes stay 30m" in idle and "at most 2 node-hours (not priced offline) per job" in idle


def test_rows_show_the_autoscaling_wait() -> None:
    rows = {(r.kind, r.type) for r in _plan().resources if not r.supporting}
    assert ("HyperPod autoscaling wait", "Custom::HyperPodAutoscalingReady") in rows


def test_sagemaker_quota_at_max_size() -> None:
    (quota,) = [q for q in _plan().quotas if q.service == "sagemaker"]
    assert (quota.needed, quota.unit) == (4, "instances (at max_size)")
