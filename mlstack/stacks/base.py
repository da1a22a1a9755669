"""`MlStack`: what every mlstack stack shares (name, environment, AZs without lookups, removal policy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.constructs.removal import RETAINED


class MlStack(Stack):
    """A stack of one blueprint.

    - The CloudFormation stack name carries the blueprint name, so two blueprints deploy side by side.
    - `availability_zones` comes from the blueprint instead of a context lookup: synth needs no credentials
      and stays deterministic (an env-specific `ec2.Vpc` otherwise asks AWS for the AZ list).
    """

    def __init__(self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            stack_name=f"{blueprint.name}-{construct_id}",
            env=Environment(account=blueprint.env.account, region=blueprint.env.region),
            **kwargs,
        )
        self.blueprint = blueprint
        Tags.of(self).add("mlstack:blueprint", blueprint.name)
        for key, value in sorted(blueprint.tags.items()):
            Tags.of(self).add(key, value)

    @property
    def availability_zones(self) -> list[str]:
        return self.blueprint.zones

    @property
    def removal_policy(self) -> RemovalPolicy:
        """`RETAINED` (DeletionPolicy RetainExceptOnCreate, UpdateReplacePolicy Retain: kept on delete and
        replacement, removed when its own first create rolls back) unless the blueprint opts in to `removal: destroy`.
        """
        return RETAINED if self.blueprint.retain else RemovalPolicy.DESTROY

    def add_alarm_topic(self, key: kms.IKey, emails: Sequence[str]) -> sns.Topic:
        """One encrypted topic every alarm of the stack notifies (TLS-only publish, CloudWatch of this account).

        Construct `AlarmTopic` and output `AlarmTopicArn` in this stack. CloudWatch encrypts what it publishes with
        the topic's key: the stack that owns `key` allows it (`ProjectKey.allow_cloudwatch_alarms_to_sns`).
        """
        topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True)
        alarms = f"arn:{self.partition}:cloudwatch:{self.region}:{self.account}:alarm:*"
        # The topic policy replaces SNS's default one: CloudWatch alarm actions need their own grant, scoped to
        # this account's alarms (CloudWatch guide, "Preventing confused deputy security issues").
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": self.account}, "ArnLike": {"aws:SourceArn": alarms}},
            )
        )
        for email in emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        CfnOutput(self, "AlarmTopicArn", value=topic.topic_arn)
        return topic
