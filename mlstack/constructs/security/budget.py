"""`ProjectBudget`: a monthly AWS Budgets cost budget on one cost-allocation tag, notifying an SNS topic."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

MAX_EMAIL_SUBSCRIBERS = 10
"""E-mail subscribers of one notification (AWS Budgets API Reference, "NotificationWithSubscribers")."""


class ProjectBudget(Construct):
    """A COST budget of `monthly_usd` a month over every resource tagged `tag_key` = `tag_value`.

    - Notifications to `topic`: ACTUAL cost above each of `thresholds_percent`, and FORECASTED above
      `forecast_percent` (None: none). The topic's policy lets budgets.amazonaws.com publish for this account's
      budgets only (AWS Cost Management User Guide, "Creating an Amazon SNS topic for budget notifications"); an
      encrypted topic's key must also allow it (`ProjectKey.allow_budgets_to_sns`).
    - The filter is the legacy `CostFilters` form `TagKeyValue: user:<key>$<value>` (AWS Budgets API Reference,
      Budget.CostFilters): the tag counts only once activated for cost allocation (`mlstack precheck` checks).

    - `action_topic` and `action_percent`: one more ACTUAL notification, to a topic of its own (a notification
      takes one SNS subscriber) that a function subscribes to, e.g. `ScaleToZero`; `action_emails` (the first
      10: a notification takes one SNS and up to 10 e-mail subscribers, AWS Budgets API Reference,
      "NotificationWithSubscribers") get that notification straight from AWS Budgets, whatever the function does.

    Props (keyword): `monthly_usd`, `tag_key`, `tag_value`, `topic` (required); `thresholds_percent` ((80, 100)),
    `forecast_percent` (100), `action_topic` and `action_percent` (None), `action_emails` (none).
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
        action_topic: sns.Topic | None = None,
        action_percent: int | None = None,
        action_emails: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        if (action_topic is None) != (action_percent is None):
            raise ValueError("action_topic and action_percent go together: give both or neither")
        stack = Stack.of(self)
        rows: list[tuple[str, float, sns.Topic, Sequence[str]]] = [("ACTUAL", p, topic, ()) for p in thresholds_percent]
        if forecast_percent is not None:
            rows.append(("FORECASTED", forecast_percent, topic, ()))
        if action_topic is not None and action_percent is not None:
            rows.append(("ACTUAL", action_percent, action_topic, list(action_emails)[:MAX_EMAIL_SUBSCRIBERS]))
        for target in {id(t): t for _, _, t, _ in rows}.values():
            target.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowBudgetsNotifications",
                    principals=[iam.ServicePrincipal("budgets.amazonaws.com")],
                    actions=["sns:Publish"],
                    resources=[target.topic_arn],
                    conditions={
                        "StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:budgets::{stack.account}:*"},
                    },
                )
            )
        notifications = [
            budgets.CfnBudget.NotificationWithSubscribersProperty(
                notification=budgets.CfnBudget.NotificationProperty(
                    notification_type=kind,
                    comparison_operator="GREATER_THAN",
                    threshold=percent,
                    threshold_type="PERCENTAGE",
                ),
                subscribers=[
                    budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=target.topic_arn),
                    *(budgets.CfnBudget.SubscriberProperty(subscription_type="EMAIL", address=e) for e in emails),
                ],
            )
            for kind, percent, target, emails in rows
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
        # The notifications name the topics: create the budget once the topics and their policies exist.
        self.budget.node.add_dependency(topic)
        if action_topic is not None:
            self.budget.node.add_dependency(action_topic)
