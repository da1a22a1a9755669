"""The footprint of Karpenter, its pools and Kueue (`mlstack.design.footprint.elastic`) against the template of
eks-karpenter-training: the training stack without its day-two resources (`stacks/training_ops.py`: alarm topic,
dashboard, alarms, step-line filters, the application log group's custom resource, budget; counted by
`design.footprint.operations`) is the footprint without them. tests/plan/test_footprint.py holds the whole."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.design.footprint import footprint
from mlstack.design.footprint.elastic import karpenter, kueue
from mlstack.design.footprint.operations import operations_stack
from mlstack.design.karpenter import pools
from mlstack.design.kueue import queues
from mlstack.plan.model import Plan
from mlstack.plan.training_elastic import plan_elastic
from tests.synth import Session

NAME = "eks-karpenter-training"
STACK = "TrainingClusterStack"
OPERATIONS_TYPES = (
    "AWS::CloudWatch::Dashboard",
    "AWS::CloudWatch::Alarm",
    "AWS::Logs::MetricFilter",
    "AWS::SNS::",
    "AWS::Budgets::Budget",
)


@pytest.fixture(scope="module")
def template(session: Session) -> dict[str, Any]:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    return session.blueprints[NAME].templates[STACK]


def test_the_training_stack_of_karpenter_and_kueue_is_its_footprint_but_the_operations_part(
    template: dict[str, Any],
) -> None:
    # The footprint used to count the p5 group as a managed node group (node group, launch template, node role) and
    # to leave out Karpenter's controller, queue, rules, node access and pool manifest and Kueue's chart and queues.
    config = load(BLUEPRINTS_DIR / f"{NAME}.yaml")
    operations = operations_stack(config)[STACK]
    synthesized = Counter(r["Type"] for r in template["Resources"].values() if r["Type"] != "AWS::CDK::Metadata")
    planned = footprint(config)[STACK] - operations
    assert not [t for t in planned if t.startswith(OPERATIONS_TYPES)]
    assert planned == synthesized - operations


def test_the_plan_rows_of_karpenter_and_kueue_are_their_footprint() -> None:
    # The rows used to have kinds with no CloudFormation type (plan construction failed for this blueprint).
    config = load(BLUEPRINTS_DIR / f"{NAME}.yaml")
    assert config.training is not None
    elastic = karpenter(pools(config.training, config.zones)) + kueue(queues(config.training))
    assert elastic["AWS::Events::Rule"] == 5 and elastic["Custom::AWSCDK-EKS-HelmChart"] == 3  # CRDs, controller, Kueue
    plan = Plan(blueprint=NAME, description="", region="us-east-1", removal="retain")
    plan_elastic(config, plan)
    described: Counter[str] = Counter()
    for row in plan.resources:
        assert row.stack == STACK and row.type is not None and not row.supporting
        described[row.type] += row.count
    # The EFA group's rules are left to the supporting rows.
    rules = ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
    assert described == Counter({t: n for t, n in elastic.items() if t not in rules})
