"""ProjectKey: the key owns its policy; only the stack that owns the key (NetworkStack) adds statements to it."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mlstack.config import BlueprintConfig
from mlstack.constructs.security.project_key import ProjectKey
from mlstack.stacks.network import NetworkStack


def _sids(template: Template) -> list[str]:
    (key,) = template.find_resources("AWS::KMS::Key").values()
    return [s["Sid"] for s in key["Properties"]["KeyPolicy"]["Statement"] if "Sid" in s]


def _network_only(layers: dict[str, Any]) -> Template:
    """NetworkStack of a blueprint, synthesized WITHOUT the layer stacks: whatever the key policy holds was put there
    by the network stack itself."""
    config = BlueprintConfig.model_validate(
        {"name": "key", "description": "test", "env": {"account": "123456789012", "region": "us-east-1"}, **layers}
    )
    return Template.from_stack(NetworkStack(cdk.App(), "NetworkStack", blueprint=config))


def test_a_training_blueprint_s_key_allows_ebs_through_ec2_from_the_network_stack_itself() -> None:
    # Before: TrainingClusterStack added these two statements to NetworkStack's key (one stack editing another's
    # resource); a NetworkStack built alone lacked them.
    training = {"training": {"node_groups": [{"name": "gpu", "instance_type": "p5.48xlarge"}]}}
    assert _sids(_network_only(training)) == [
        "AllowCloudWatchLogs",
        "AllowEbsThroughEc2",
        "AllowEbsGrantsThroughEc2",
        # The training stack's alarm topic (dashboard alarms) is encrypted with this key too.
        "AllowCloudWatchAlarmsToEncryptedTopics",
    ]


def test_a_budget_lets_aws_budgets_use_the_key() -> None:
    training = {"training": {"node_groups": [{"name": "gpu", "instance_type": "p5.48xlarge"}]}}
    sids = _sids(_network_only({**training, "budget": {"monthly_usd": 1000}}))
    assert sids[-1] == "AllowBudgetsToEncryptedTopics"


def test_a_blueprint_without_layers_gets_only_the_cloudwatch_logs_statement() -> None:
    assert _sids(_network_only({})) == ["AllowCloudWatchLogs"]


def test_project_key_methods_add_each_statement_once_and_keep_the_plain_key_logical_id() -> None:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    key = ProjectKey(stack, "ProjectKey", description="test", alias="alias/test")
    for _ in range(2):
        key.allow_ebs_through_ec2()
        key.allow_cloudwatch_alarms_to_sns()
    template = Template.from_stack(stack)
    assert _sids(template) == [
        "AllowCloudWatchLogs",
        "AllowEbsThroughEc2",
        "AllowEbsGrantsThroughEc2",
        "AllowCloudWatchAlarmsToEncryptedTopics",
    ]
    # Same construct path as `kms.Key(stack, "ProjectKey")`: an existing key keeps its logical ID.
    assert list(template.find_resources("AWS::KMS::Key")) == ["ProjectKeyFDD03260"]
    (key_resource,) = template.find_resources("AWS::KMS::Key").values()
    assert key_resource["DeletionPolicy"] == "RetainExceptOnCreate"
    assert key_resource["Properties"]["EnableKeyRotation"] is True
    assert key_resource["Properties"]["PendingWindowInDays"] == 30


@pytest.mark.parametrize("sid", ["AllowEbsThroughEc2", "AllowEbsGrantsThroughEc2"])
def test_ebs_statements_are_bounded_to_the_account_via_ec2(sid: str) -> None:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    ProjectKey(stack, "ProjectKey", description="test", alias="alias/test").allow_ebs_through_ec2()
    (key,) = Template.from_stack(stack).find_resources("AWS::KMS::Key").values()
    (statement,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == sid]
    assert statement["Condition"]["StringEquals"] == {
        "kms:CallerAccount": "123456789012",
        "kms:ViaService": "ec2.eu-west-1.amazonaws.com",
    }
