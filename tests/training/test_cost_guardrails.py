"""Cost guardrails: the `budget:` section (validation, the AWS::Budgets::Budget on the blueprint's tag, who may
publish to the encrypted topic, the plan's comparison) and the Capacity Block expiration rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template
from pydantic import ValidationError

from mlstack.blueprint import build
from mlstack.catalog.prices import price
from mlstack.config import BlueprintConfig, load
from mlstack.constructs.security.budget import ProjectBudget
from mlstack.constructs.training.capacity_block import DETAIL_TYPES, CapacityBlockExpiry
from mlstack.design.cost import capacity_block_reservations
from mlstack.plan.build import build_plan
from mlstack.plan.operations import max_per_hour
from tests import variants
from tests.synth import TEST_CONTEXT, template

BLOCK = "cr-0123456789abcdef0"


def _with(blueprint: str, **top: Any) -> BlueprintConfig:
    data = load(blueprint).model_dump(exclude_unset=True)
    return BlueprintConfig.model_validate({**data, **top})


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"monthly_usd": 0}, "monthly_usd"),
        ({"monthly_usd": 100, "thresholds_percent": [0, 80]}, "must each be 1..1000"),
        ({"monthly_usd": 100, "thresholds_percent": [80, 80]}, "repeats a value"),
        ({"monthly_usd": 100, "thresholds_percent": [10, 20, 30, 40, 50]}, "AWS Budgets allows 5"),
        ({"monthly_usd": 100, "expected_hours": 800}, "expected_hours"),
        ({"monthly_usd": 100, "emails": ["a@b.c"]}, "emails"),
        ({"monthly_usd": 100, "scale_to_zero_at_percent": 100}, "also in thresholds_percent"),
        ({"monthly_usd": 100, "thresholds_percent": [50, 80], "scale_to_zero_at_percent": 0}, "scale_to_zero"),
    ],
)
def test_bad_budget_input_is_one_clear_error(budget: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _with("eks-g6e-training", budget=budget)


def test_budget_scale_to_zero_is_offered_on_every_engine() -> None:
    budget = {"monthly_usd": 100, "thresholds_percent": [80], "scale_to_zero_at_percent": 100}
    for name in ("hyperpod-eks-training", "hyperpod-slurm-training", "batch-training", "eks-gpu-training"):
        assert _with(name, budget=budget).budget is not None


def test_a_budget_needs_the_training_stack_topic() -> None:
    with pytest.raises(ValidationError, match="budget: needs a training section"):
        _with("inference-serverless", budget={"monthly_usd": 100})


def test_budget_construct_filters_on_the_tag_and_notifies_the_topic() -> None:
    stack = Stack(App(), "Plain", env={"account": "111122223333", "region": "us-east-1"})
    topic = sns.Topic(stack, "Topic")
    ProjectBudget(
        stack,
        "Budget",
        monthly_usd=5000,
        tag_key="mlstack:blueprint",
        tag_value="demo",
        topic=topic,
        thresholds_percent=(50, 100),
        forecast_percent=100,
    )
    resources = Template.from_stack(stack).to_json()["Resources"]
    budget = next(r for r in resources.values() if r["Type"] == "AWS::Budgets::Budget")
    topic_id = next(k for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic")
    props = budget["Properties"]
    assert props["Budget"] == {
        "BudgetLimit": {"Amount": 5000, "Unit": "USD"},
        "BudgetType": "COST",
        "CostFilters": {"TagKeyValue": ["user:mlstack:blueprint$demo"]},
        "TimeUnit": "MONTHLY",
    }
    assert [
        (n["Notification"]["NotificationType"], n["Notification"]["Threshold"], n["Subscribers"])
        for n in props["NotificationsWithSubscribers"]
    ] == [
        ("ACTUAL", 50, [{"Address": {"Ref": topic_id}, "SubscriptionType": "SNS"}]),
        ("ACTUAL", 100, [{"Address": {"Ref": topic_id}, "SubscriptionType": "SNS"}]),
        ("FORECASTED", 100, [{"Address": {"Ref": topic_id}, "SubscriptionType": "SNS"}]),
    ]
    policy = next(r for r in resources.values() if r["Type"] == "AWS::SNS::TopicPolicy")
    (statement,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "AllowBudgetsNotifications"
    ]
    assert statement["Principal"] == {"Service": "budgets.amazonaws.com"}
    assert statement["Action"] == "sns:Publish"
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "111122223333"},
        "ArnLike": {
            "aws:SourceArn": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":budgets::111122223333:*"]]}
        },
    }
    assert topic_id in budget["DependsOn"]


def test_shipped_budget_blueprint_lets_budgets_use_the_topic_key(session: Any) -> None:
    network = template(session, "eks-g6e-training", "NetworkStack").to_json()["Resources"]
    key = next(r for r in network.values() if r["Type"] == "AWS::KMS::Key")
    (statement,) = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "AllowBudgetsToEncryptedTopics"
    ]
    assert statement["Principal"] == {"Service": "budgets.amazonaws.com"}
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    training = template(session, "eks-g6e-training", "TrainingClusterStack").to_json()["Resources"]
    budget = next(r for r in training.values() if r["Type"] == "AWS::Budgets::Budget")
    assert budget["Properties"]["Budget"]["CostFilters"] == {"TagKeyValue": ["user:mlstack:blueprint$eks-g6e-training"]}
    assert budget["Properties"]["Budget"]["BudgetLimit"] == {"Amount": 5000, "Unit": "USD"}


def test_plan_warns_when_the_most_expensive_month_exceeds_the_budget() -> None:
    shipped = build_plan(load("eks-g6e-training"))
    assert not [w for w in shipped.warnings if w.startswith("budget:")]
    top, unpriced = max_per_hour(load("eks-g6e-training"), shipped)
    # Standing costs plus both g6e.12xlarge nodes at the catalog's dated on-demand price.
    g6e = price("g6e.12xlarge")
    assert g6e is not None
    assert top == pytest.approx(shipped.per_hour + 2 * g6e.usd_per_hour)
    assert unpriced == []
    small = _with("eks-g6e-training", budget={"monthly_usd": 1000, "expected_hours": 200})
    (warning,) = [w for w in build_plan(small).warnings if w.startswith("budget:")]
    assert f"${top:,.2f}/hour x 200 hours" in warning
    assert "above budget.monthly_usd $1,000" in warning
    assert any(r.kind == "Budget" and r.type == "AWS::Budgets::Budget" for r in shipped.resources)


def test_plan_says_what_it_cannot_price() -> None:
    config = _with("hyperpod-eks-training", budget={"monthly_usd": 1000})
    assert any("have no price here" in w for w in build_plan(config).warnings)


# --------------------------------------------------------------------------------------------- Capacity Blocks


def _batch_on_a_block() -> BlueprintConfig:
    data = load("batch-training").model_dump(exclude_unset=True)
    group = {**data["training"]["node_groups"][0], "capacity": {"type": "capacity_block", "reservation_id": BLOCK}}
    data["training"] = {**data["training"], "node_groups": [group]}
    return BlueprintConfig.model_validate(data)


def test_capacity_block_rule_watches_the_blueprint_block_and_notifies() -> None:
    config = _batch_on_a_block()
    assert capacity_block_reservations(config.training) == (BLOCK,)  # type: ignore[arg-type]
    assert capacity_block_reservations(load("batch-training").training) == ()  # type: ignore[arg-type]
    app = App(context=TEST_CONTEXT)
    built = build(app, config)
    assert built.training is not None
    resources = Template.from_stack(built.training).to_json()["Resources"]
    (rule,) = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": list(DETAIL_TYPES),
        "detail": {"capacity-reservation-id": [BLOCK]},
    }
    topic = next(k for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic")
    sns_target, function_target = rule["Properties"]["Targets"]
    assert sns_target["Arn"] == {"Ref": topic}
    assert "Fn::GetAtt" in function_target["Arn"]
    target = sns_target
    assert any("capacity-reservation-id" in v for v in target["InputTransformer"]["InputPathsMap"].values())
    key = next(
        r for r in Template.from_stack(built.network).to_json()["Resources"].values() if r["Type"] == "AWS::KMS::Key"
    )
    assert any(s.get("Sid") == "AllowEventBridgeToEncryptedTopics" for s in key["Properties"]["KeyPolicy"]["Statement"])


def test_capacity_block_rule_needs_ids() -> None:
    stack = Stack(App(), "Plain")
    with pytest.raises(ValueError, match="reservation_ids is empty"):
        CapacityBlockExpiry(stack, "Cb", reservation_ids=[], topic=sns.Topic(stack, "T"))


def _eks_on_a_block() -> BlueprintConfig:
    data = load("eks-gpu-training").model_dump(exclude_unset=True)
    group = {
        **data["training"]["node_groups"][0],
        "capacity": {"type": "capacity_block", "reservation_id": BLOCK},
        "placement_group": False,
    }
    data["training"] = {**data["training"], "node_groups": [group]}
    return BlueprintConfig.model_validate({**data, "name": "eks-block"})


@pytest.fixture(scope="module")
def on_blocks(variants_session: Any) -> Any:
    """The batch and EKS blueprints on a Capacity Block and three at their budget (`SESSION_VARIANTS`)."""
    return variants.only(variants_session, SESSION_VARIANTS)


def _g6e_scaling_at_budget() -> BlueprintConfig:
    budget = {"monthly_usd": 5000, "thresholds_percent": [50, 80], "scale_to_zero_at_percent": 100}
    return _with("eks-g6e-training", name="g6e-budget", budget=budget)


def _hyperpod_scaling_at_budget(engine: str = "slurm") -> BlueprintConfig:
    budget = {"monthly_usd": 5000, "thresholds_percent": [50, 80], "scale_to_zero_at_percent": 100}
    name = "hyperpod-budget" if engine == "slurm" else f"hyperpod-{engine}-budget"
    if engine != "eks":
        return _with(f"hyperpod-{engine}-training", name=name, budget=budget)
    data = load(f"hyperpod-{engine}-training").model_dump(exclude_unset=True)
    data["training"]["alarm_emails"] = [f"ops{i}@example.com" for i in range(12)]
    return BlueprintConfig.model_validate({**data, "name": name, "budget": budget})


def _batch_block() -> BlueprintConfig:
    return BlueprintConfig.model_validate({**_batch_on_a_block().model_dump(exclude_unset=True), "name": "batch-block"})


SESSION_VARIANTS = {
    "batch-block": _batch_block,
    "eks-block": _eks_on_a_block,
    "g6e-budget": _g6e_scaling_at_budget,
    "hyperpod-budget": _hyperpod_scaling_at_budget,
    "hyperpod-eks-budget": lambda: _hyperpod_scaling_at_budget("eks"),
}
"""Synthesized by the run's synth process with cdk-nag and CDK's validation, like the shipped blueprints, and read
by the same cfn-lint, checkov, cfn-guard and asl-validator runs (tests/variants.py)."""


def _statements(resources: dict[str, Any], prefix: str = "ScaleToZeroRole") -> list[dict[str, Any]]:
    policy = next(r for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and k.startswith(prefix))
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def test_the_variants_pass_the_gates(on_blocks: Any, gated: Any) -> None:
    # cdk-nag and CDK's validation at synth, then the run's cfn-lint, checkov and cfn-guard (tests/variants.py).
    assert all("TrainingClusterStack" in on_blocks.blueprints[name].templates for name in SESSION_VARIANTS)
    assert variants.gate_problems(gated, on_blocks) == []


def test_eks_block_expiry_scales_only_the_node_groups_on_the_block(on_blocks: Any) -> None:
    resources = on_blocks.blueprints["eks-block"].templates["TrainingClusterStack"]["Resources"]
    (rule,) = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    function = next(
        k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and k.startswith("ScaleToZero")
    )
    assert {"Fn::GetAtt": [function, "Arn"]} in [t["Arn"] for t in rule["Properties"]["Targets"]]
    eks_statement = next(s for s in _statements(resources) if "eks:UpdateNodegroupConfig" in s["Action"])
    assert eks_statement["Action"] == ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"]
    (arn,) = [eks_statement["Resource"]] if isinstance(eks_statement["Resource"], dict) else eks_statement["Resource"]
    assert arn["Fn::GetAtt"][1] == "Arn" and "P5" in arn["Fn::GetAtt"][0]
    env = resources[function]["Properties"]["Environment"]["Variables"]
    assert env["CLUSTER_NAME"] == "eks-block-cluster"
    assert not [s for s in _statements(resources) if str(s["Action"]).startswith("batch:")]


def test_batch_block_expiry_terminates_jobs_and_disables_the_environment(on_blocks: Any) -> None:
    resources = on_blocks.blueprints["batch-block"].templates["TrainingClusterStack"]["Resources"]
    actions = {json.dumps(s["Action"]): s["Resource"] for s in _statements(resources)}
    assert actions['"batch:ListJobs"'] == "*"
    assert "job/*" in json.dumps(actions['"batch:TerminateJob"'])
    compute = next(k for k, r in resources.items() if r["Type"] == "AWS::Batch::ComputeEnvironment")
    assert actions['"batch:UpdateComputeEnvironment"'] == {"Ref": compute}
    assert not [s for s in _statements(resources) if "eks:" in json.dumps(s["Action"])]


def test_budget_scale_to_zero_has_its_own_topic_and_tells_the_alarm_topic(on_blocks: Any) -> None:
    resources = on_blocks.blueprints["g6e-budget"].templates["TrainingClusterStack"]["Resources"]
    topics = {k: r for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic"}
    alarm_topic = next(k for k in topics if k.startswith("AlarmTopic"))
    action_topic = next(k for k in topics if k.startswith("BudgetActionTopic"))
    budget = next(r for r in resources.values() if r["Type"] == "AWS::Budgets::Budget")
    targets = [
        (n["Notification"]["NotificationType"], n["Notification"]["Threshold"], n["Subscribers"][0]["Address"])
        for n in budget["Properties"]["NotificationsWithSubscribers"]
    ]
    assert targets == [
        ("ACTUAL", 50, {"Ref": alarm_topic}),
        ("ACTUAL", 80, {"Ref": alarm_topic}),
        ("FORECASTED", 100, {"Ref": alarm_topic}),
        ("ACTUAL", 100, {"Ref": action_topic}),
    ]
    policies = [r for r in resources.values() if r["Type"] == "AWS::SNS::TopicPolicy"]
    assert {json.dumps(p["Properties"]["Topics"]) for p in policies if "budgets.amazonaws.com" in json.dumps(p)} == {
        json.dumps([{"Ref": alarm_topic}]),
        json.dumps([{"Ref": action_topic}]),
    }
    function = next(
        k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and k.startswith("BudgetScale")
    )
    (subscription,) = [r for r in resources.values() if r["Type"] == "AWS::SNS::Subscription"]
    assert subscription["Properties"]["TopicArn"] == {"Ref": action_topic}
    assert subscription["Properties"]["Endpoint"] == {"Fn::GetAtt": [function, "Arn"]}
    env = resources[function]["Properties"]["Environment"]["Variables"]
    assert env["NOTIFY_TOPIC_ARN"] == {"Ref": alarm_topic}
    statements = _statements(resources, "BudgetScaleToZeroRole")
    publish = next(s for s in statements if s["Action"] == "sns:Publish")
    assert publish["Resource"] == {"Ref": alarm_topic}
    assert any(sorted(s["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"] for s in statements)
    eks_statement = next(s for s in statements if "eks:UpdateNodegroupConfig" in s["Action"])
    assert "G6e" in json.dumps(eks_statement["Resource"])


def test_budget_action_notification_also_emails_the_alarm_recipients(on_blocks: Any) -> None:
    # The function may fail (or never run): AWS Budgets itself e-mails the alarm recipients at that threshold too,
    # the first 10 of the 12 (one SNS and up to 10 e-mail subscribers per notification).
    resources = on_blocks.blueprints["hyperpod-eks-budget"].templates["TrainingClusterStack"]["Resources"]
    budget = next(r for r in resources.values() if r["Type"] == "AWS::Budgets::Budget")
    action_topic = next(
        k for k, r in resources.items() if k.startswith("BudgetActionTopic") and r["Type"] == "AWS::SNS::Topic"
    )
    (action,) = [
        n
        for n in budget["Properties"]["NotificationsWithSubscribers"]
        if n["Subscribers"][0]["Address"] == {"Ref": action_topic}
    ]
    assert action["Subscribers"][1:] == [
        {"SubscriptionType": "EMAIL", "Address": f"ops{i}@example.com"} for i in range(10)
    ]
    others = [n for n in budget["Properties"]["NotificationsWithSubscribers"] if n is not action]
    assert all(len(n["Subscribers"]) == 1 for n in others)  # the alarm topic's own e-mail subscriptions carry these


@pytest.mark.parametrize(
    ("name", "prefix"),
    [("batch-block", "ScaleToZero"), ("eks-block", "ScaleToZero"), ("g6e-budget", "BudgetScaleToZero"),
     ("hyperpod-budget", "BudgetScaleToZero"), ("hyperpod-eks-budget", "BudgetScaleToZero")],
)  # fmt: skip
def test_a_failed_scale_down_alarms_to_the_alarm_topic(on_blocks: Any, name: str, prefix: str) -> None:
    resources = on_blocks.blueprints[name].templates["TrainingClusterStack"]["Resources"]
    topic = next(k for k, r in resources.items() if k.startswith("AlarmTopic") and r["Type"] == "AWS::SNS::Topic")
    function = next(k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and k.startswith(prefix))
    (alarm,) = [
        r["Properties"] for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Dimensions") == [
            {"Name": "FunctionName", "Value": {"Ref": function}}
        ]
    ]  # fmt: skip
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"], alarm["Period"]) == (
        "AWS/Lambda", "Errors", "Sum", 300
    )  # fmt: skip
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic}]


@pytest.mark.parametrize("name", ["hyperpod-budget", "hyperpod-eks-budget"])
def test_hyperpod_budget_action_scales_the_accelerated_groups_with_scoped_permissions(
    on_blocks: Any, name: str
) -> None:
    resources = on_blocks.blueprints[name].templates["TrainingClusterStack"]["Resources"]
    cluster = next(k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::Cluster")
    groups = resources[cluster]["Properties"]["InstanceGroups"]
    accelerated = [g["InstanceGroupName"] for g in groups if g["InstanceType"].startswith(("ml.p", "ml.g", "ml.trn"))]
    assert accelerated
    if name == "hyperpod-budget":
        assert len(accelerated) < len(groups)  # the Slurm controller (and login) groups are not scaled
    function = next(
        k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and k.startswith("BudgetScale")
    )
    env = resources[function]["Properties"]["Environment"]["Variables"]
    assert json.loads(env["HYPERPOD_GROUPS"]) == accelerated
    assert env["HYPERPOD_CLUSTER"] == resources[cluster]["Properties"]["ClusterName"]
    statements = _statements(resources, "BudgetScaleToZeroRole")
    update = next(s for s in statements if "sagemaker:UpdateCluster" in s["Action"])
    assert update["Action"] == ["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"]
    assert update["Resource"] == {"Fn::GetAtt": [cluster, "ClusterArn"]}
    passrole = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert passrole["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    role = resources[cluster]["Properties"]["InstanceGroups"][0]["ExecutionRole"]
    assert passrole["Resource"] == role
    assert not [s for s in statements if "eks:" in json.dumps(s["Action"]) or "batch:" in json.dumps(s["Action"])]


@pytest.mark.parametrize("name", ["hyperpod-budget", "hyperpod-eks-budget", "g6e-budget", "batch-block", "eks-block"])
def test_mlstack_access_follows_every_scale_down_call_and_denies_none(on_blocks: Any, name: str) -> None:
    from mlstack.access import cli as access_cli
    from mlstack.access import evaluate

    report = evaluate(name, access_cli.stacks_of(on_blocks.blueprints[name]))
    calls = [c for c in report.calls if "scale-to-zero handler" in c.what]
    assert calls, sorted({c.what for c in report.calls})
    denied = [(c.action, c.resource, c.decision) for c in calls if c.decision != "Allowed"]
    assert denied == []
    actions = {c.action for c in calls}
    expected = {
        "hyperpod-budget": {"sagemaker:DescribeCluster", "sagemaker:UpdateCluster", "iam:PassRole", "sns:Publish"},
        "hyperpod-eks-budget": {"sagemaker:DescribeCluster", "sagemaker:UpdateCluster", "iam:PassRole", "sns:Publish"},
        "g6e-budget": {"eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "sns:Publish"},
        "batch-block": {"batch:ListJobs", "batch:TerminateJob", "batch:UpdateComputeEnvironment"},
        "eks-block": {"eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"},
    }[name]
    assert expected <= actions
    passes = [c for c in calls if c.action == "iam:PassRole"]
    assert all(c.context == {"iam:PassedToService": "sagemaker.amazonaws.com"} for c in passes)


def test_budget_scale_to_zero_with_karpenter_pools_is_offered() -> None:
    # Was refused with one line; the pools' step (tests/training/test_cost_guardrails_karpenter.py) now stops them.
    budget = {"monthly_usd": 100, "thresholds_percent": [80], "scale_to_zero_at_percent": 100}
    for name in ("eks-karpenter-training", "hyperpod-eks-teams"):
        config = _with(name, budget=budget)
        assert config.budget is not None and config.budget.scale_to_zero_at_percent == 100


def test_plan_says_the_budget_action_leaves_endpoints_billing() -> None:
    inference = load("inference-gpu-realtime").model_dump(exclude_unset=True)["inference"]
    budget = {"monthly_usd": 100_000, "thresholds_percent": [80], "scale_to_zero_at_percent": 100}
    config = _with("eks-g6e-training", budget=budget, inference=inference)
    (warning,) = [w for w in build_plan(config).warnings if "endpoints keep billing" in w]
    assert "aws sagemaker delete-endpoint --endpoint-name" in warning
    assert not [w for w in build_plan(_with("eks-g6e-training", budget=budget)).warnings if "keep billing" in w]
