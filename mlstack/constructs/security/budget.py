"""`ProjectBudget`: a monthly AWS Budgets cost budget on one cost-allocation tag, notifying an SNS topic."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct


class ProjectBudget(Construct):
    """A COST budget of `monthly_usd` a month over every resource tagged `tag_key` = `tag_value`.

    - Notifications to `topic`: ACTUAL cost above each of `thresholds_percent`, and FORECASTED above
      `forecast_percent` (None: none). The topic's policy lets budgets.amazonaws.com publish for this account's
      budgets only (AWS Cost Management User Guide, "Creating an Amazon SNS topic for budget notifications"); an
      encrypted topic's key must also allow it (`ProjectKey.allow_budgets_to_sns`).
    - The filter is the legacy `CostFilters` form `TagKeyValue: user:<key>$<value>` (AWS Budgets API Reference,
      Budget.CostFilters): the tag counts only once activated for cost allocation (`mlstack precheck` checks).

    Props (keyword): `monthly_usd`, `tag_key`, `tag_value`, `topic` (required); `thresholds_percent` ((80, 100)),
    `forecast_percent` (100).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        monthly_usd: float,
        tag_key: str,
        tag_value: str,
        topic: sns.Topic,
        thresholds_percent: Sequence[int] = (80, 100),
        forecast_percent: int | None = 100,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowBudgetsNotifications",
                principals=[iam.ServicePrincipal("budgets.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:budgets::{stack.account}:*"},
                },
            )
        )
        subscriber = [budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=topic.topic_arn)]
        notifications = [
            budgets.CfnBudget.NotificationWithSubscribersProperty(
                notification=budgets.CfnBudget.NotificationProperty(
                    notification_type=kind,
                    comparison_operator="GREATER_THAN",
                    threshold=percent,
                    threshold_type="PERCENTAGE",
                ),
                subscribers=subscriber,
            )
            for kind, percent in [("ACTUAL", p) for p in thresholds_percent]
            + ([("FORECASTED", forecast_percent)] if forecast_percent is not None else [])
        ]
        self.budget = budgets.CfnBudget(
            self,
            "Budget",
            budget=budgets.CfnBudget.BudgetDataProperty(
                budget_type="COST",
                time_unit="MONTHLY",
                budget_limit=budgets.CfnBudget.SpendProperty(amount=monthly_usd, unit="USD"),
                cost_filters={"TagKeyValue": [f"user:{tag_key}${tag_value}"]},
            ),
            notifications_with_subscribers=notifications,
        )
        # The notifications name the topic: create the budget once the topic and its policy exist.
        self.budget.node.add_dependency(topic)
