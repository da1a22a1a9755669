"""The other shapes of `eks-llm-serving`, synthesized (cdk-nag on) like the shipped blueprints: fixed GPU node
groups (`capacity_manager: node_groups`), scale-to-zero on Karpenter (`min_replicas: 0` with `active_hours`) and a
Neuron (Inferentia2) endpoint on a Karpenter pool.
Each holds the plan's resources equal to its templates, passes the gates (its templates are read by the run's
cfn-lint, checkov and cfn-guard runs, tests/variants.py), and applies what its mode needs."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest
import yaml

from mlstack.access import evaluate
from mlstack.access.cli import stacks_of
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig
from mlstack.plan import build_plan
from tests import variants as session_variants
from tests.plan.test_footprint import differences, plan_counts, template_counts
from tests.synth import Session

BASE: dict[str, Any] = yaml.safe_load((BLUEPRINTS_DIR / "eks-llm-serving.yaml").read_text())
HOURS = {"timezone": "Europe/Berlin", "start": "30 7 * * 1-5", "end": "0 19 * * 1-5"}


def _fixed(data: dict[str, Any]) -> None:
    data["inference"]["capacity_manager"] = "node_groups"
    del data["inference"]["karpenter"]
    data["inference"]["endpoints"][0]["autoscaling"] = {"min_replicas": 1, "max_replicas": 1}


def _to_zero(data: dict[str, Any]) -> None:
    data["inference"]["endpoints"][0]["autoscaling"] = {"min_replicas": 0, "max_replicas": 2, "active_hours": HOURS}


def _neuron(data: dict[str, Any]) -> None:
    data["inference"]["endpoints"][0].update(instance_type="inf2.8xlarge")


VARIANTS = {"serving-fixed": _fixed, "serving-to-zero": _to_zero, "serving-neuron": _neuron}


def _config(name: str) -> BlueprintConfig:
    data = copy.deepcopy(BASE)
    VARIANTS[name](data)
    return BlueprintConfig.model_validate({**data, "name": name})


SESSION_VARIANTS = {name: functools.partial(_config, name) for name in VARIANTS}
"""Synthesized by the run's synth process with cdk-nag and CDK's validation, like the shipped blueprints, and read
by the same cfn-lint, checkov, cfn-guard and asl-validator runs (tests/variants.py)."""


@pytest.fixture(scope="module")
def variants(variants_session: Session) -> Session:
    return session_variants.only(variants_session, SESSION_VARIANTS)


def _manifests(session: Session, name: str) -> list[dict[str, Any]]:
    stacks = stacks_of(session.blueprints[name])
    stack = next(s for s in stacks.templates if s.endswith("-InferenceStack"))
    found: list[dict[str, Any]] = []
    for resource in stacks.resources(stack).values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            found += json.loads(stacks.text(stack, resource["Properties"]["Manifest"]))
    return found


def test_the_variants_pass_the_gates(variants: Session, gated: Session) -> None:
    # cdk-nag and CDK's validation at synth, then the run's cfn-lint, checkov and cfn-guard (tests/variants.py).
    # serving-fixed's checkov finding (an AWS secret key in its path) was checkov reading the file's path.
    assert session_variants.gate_problems(gated, variants) == []


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_is_planned_as_built_and_allowed(variants: Session, name: str) -> None:
    item = variants.blueprints[name]
    assert "InferenceStack" in item.templates
    plan = build_plan(_config(name))
    found = differences(plan_counts(plan), template_counts(item.templates))
    assert not found, "\n".join(found)
    assert not evaluate(name, stacks_of(item)).denied


def test_fixed_node_groups_hold_what_min_replicas_needs(variants: Session) -> None:
    resources = variants.blueprints["serving-fixed"].templates["InferenceStack"]["Resources"]
    groups = {
        r["Properties"]["Labels"]["mlstack.io/node-group"]: r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Nodegroup"
    }
    assert set(groups) == {"system", "chat"}
    chat = groups["chat"]
    assert chat["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert chat["ScalingConfig"] == {"DesiredSize": 1, "MinSize": 1, "MaxSize": 1}
    assert chat["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}]
    kinds = {m["kind"] for m in _manifests(variants, "serving-fixed")}
    assert "NodePool" not in kinds and "PodDisruptionBudget" in kinds
    assert not [r for r in resources.values() if r["Type"] == "AWS::SQS::Queue"]  # no Karpenter


def test_scale_to_zero_applies_the_cron_window(variants: Session) -> None:
    docs = _manifests(variants, "serving-to-zero")
    spec = next(m for m in docs if m["kind"] == "ScaledObject")["spec"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] == 2 and spec["cooldownPeriod"] == 600
    assert [t["type"] for t in spec["triggers"]] == ["metrics-api", "metrics-api", "cron"]
    assert spec["triggers"][2]["metadata"] == {**HOURS, "desiredReplicas": "1"}
    assert "replicas" not in next(m for m in docs if m["kind"] == "Deployment")["spec"]
    pool = next(m for m in docs if m["kind"] == "NodePool")["spec"]
    assert pool["limits"] == {"nvidia.com/gpu": "2"}


def test_a_neuron_pool_launches_inferentia_nodes_the_server_selects_and_tolerates(variants: Session) -> None:
    docs = _manifests(variants, "serving-neuron")
    node = next(m for m in docs if m["kind"] == "NodePool")["spec"]
    pod = next(m for m in docs if m["kind"] == "Deployment")["spec"]["template"]["spec"]
    requirements = {r["key"]: r["values"] for r in node["template"]["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"] == ["inf2.8xlarge"]
    # The cost cap in Neuron chips: max_replicas 2 servers of the one Inferentia2 chip of an inf2.8xlarge.
    assert node["limits"] == {"aws.amazon.com/neuron": "2"}
    assert node["template"]["spec"]["taints"] == [
        {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"}
    ]
    assert [t["key"] for t in pod["tolerations"]] == ["aws.amazon.com/neuron"]
    for key, value in pod["nodeSelector"].items():
        assert node["template"]["metadata"]["labels"][key] == value
    assert node["template"]["metadata"]["labels"]["mlstack.io/accelerator-kind"] == "inferentia"
    assert pod["containers"][0]["resources"]["limits"]["aws.amazon.com/neuron"] == "1"
    assert "lifecycle" in pod["containers"][0]  # the drain, as on GPU servers
    # The Neuron device plugin comes with the pool (Karpenter's nodes advertise aws.amazon.com/neuron through it).
    resources = variants.blueprints["serving-neuron"].templates["InferenceStack"]["Resources"]
    charts = {r["Properties"]["Release"] for r in resources.values() if r["Type"].endswith("HelmChart")}
    assert "neuron-helm-chart" in charts and "nvidia-device-plugin" not in charts
