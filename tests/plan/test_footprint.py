"""The plan's resources equal the templates': for every shipped blueprint, `mlstack plan --json` gives, per stack
and CloudFormation type, exactly the count the session's synthesized templates hold (CDK-internal resources
included). A construct that adds or drops a resource must change `mlstack.design.footprint` with it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.plan import build_plan
from mlstack.plan.model import KIND_TYPES, Plan, Resource
from tests.conftest import selected_blueprints
from tests.synth import Session

Counts = Counter[tuple[str, str]]


def template_counts(templates: dict[str, dict[str, Any]]) -> Counts:
    return Counter(
        (stack, resource["Type"])
        for stack, template in templates.items()
        for resource in template.get("Resources", {}).values()
    )


def plan_counts(plan: Plan) -> Counts:
    found: Counts = Counter()
    for row in plan.to_json()["resources"]:
        if row["type"] is not None:
            found[(row["stack"], row["type"])] += row["count"]
    return found


def differences(planned: Counts, synthesized: Counts) -> list[str]:
    return [
        f"{stack} {type_}: plan {planned[(stack, type_)]}, template {synthesized[(stack, type_)]}"
        for stack, type_ in sorted(set(planned) | set(synthesized))
        if planned[(stack, type_)] != synthesized[(stack, type_)]
    ]


@pytest.mark.parametrize("name", selected_blueprints())
def test_plan_resources_equal_the_templates_per_stack_and_type(session: Session, name: str) -> None:
    plan = build_plan(load(BLUEPRINTS_DIR / f"{name}.yaml"))
    synthesized = template_counts(session.blueprints[name].templates)
    assert not differences(plan_counts(plan), synthesized), "\n".join(differences(plan_counts(plan), synthesized))
    assert set(plan.stacks) == {stack for stack, _ in synthesized}


def test_the_comparison_sees_a_missing_and_an_extra_resource() -> None:
    plan = Plan(blueprint="x", description="", region="us-east-1", removal="retain")
    plan.resources.append(Resource("NetworkStack", "VPC", "", 1))
    plan.resources.append(Resource("NetworkStack", "KMS key", "", 1))
    templates = {"NetworkStack": {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC"}, "Role": {"Type": "AWS::IAM::Role"}}}}
    assert differences(plan_counts(plan), template_counts(templates)) == [
        "NetworkStack AWS::IAM::Role: plan 0, template 1",
        "NetworkStack AWS::KMS::Key: plan 1, template 0",
    ]


@pytest.mark.parametrize("name", ["inference-async"])
def test_inference_async_plans_the_model_bucket_in_the_data_stack_and_every_alarm_and_topic(name: str) -> None:
    # The plan used to list the model bucket under InferenceStack, 2 alarms (the template has 9) and 2 topics (3).
    plan = build_plan(load(BLUEPRINTS_DIR / f"{name}.yaml"))
    described = [r for r in plan.resources if not r.supporting]
    assert next(r.detail for r in described if r.stack == "DataStack" and r.kind == "S3 bucket").startswith("models")
    assert sum(r.count for r in described if r.stack == "InferenceStack" and r.kind == "CloudWatch alarm") == 9
    assert sum(r.count for r in described if r.stack == "InferenceStack" and r.kind == "SNS topic") == 3


def test_a_described_row_needs_a_known_kind() -> None:
    assert KIND_TYPES["S3 bucket"] == "AWS::S3::Bucket"
    with pytest.raises(ValueError, match="KIND_TYPES"):
        Resource("NetworkStack", "Widget", "")
