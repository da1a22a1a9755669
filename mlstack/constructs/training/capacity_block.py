"""`CapacityBlockExpiry`: EC2's Capacity Block expiration warning for the blueprint's reservations, to the
stack's topic (and, optionally, to a function that scales the groups on them to zero)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

SOURCE = "aws.ec2"
DETAIL_TYPES = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")
"""EC2 sends "Capacity Block Expiration Warning" 40 minutes before a block ends; its instances start terminating
10 minutes later (EC2 User Guide, "Monitor Capacity Blocks using EventBridge"; EventBridge events reference, Amazon
EC2 events). The guide's example event has carried both names; the rule matches either."""


class CapacityBlockExpiry(Construct):
    """An EventBridge rule on the expiration warning of `reservation_ids` (detail `capacity-reservation-id`) that
    publishes a one-line message to `topic` and, when given, invokes `scale_function` with the event.

    An encrypted topic's key must let EventBridge use it (`ProjectKey.allow_eventbridge_to_sns`).

    Props (keyword): `reservation_ids`, `topic` (required); `scale_function` (None), `what` ("the training nodes":
    what the message says will stop).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        reservation_ids: Sequence[str],
        topic: sns.ITopic,
        scale_function: lambda_.IFunction | None = None,
        what: str = "the training nodes",
    ) -> None:
        super().__init__(scope, construct_id)
        if not reservation_ids:
            raise ValueError("reservation_ids is empty: a Capacity Block rule needs the cr-... IDs it watches")
        self.rule = events.Rule(
            self,
            "Rule",
            description="EC2 Capacity Block expiration warning for this cluster's reservations",
            event_pattern=events.EventPattern(
                source=[SOURCE],
                detail_type=list(DETAIL_TYPES),
                detail={"capacity-reservation-id": list(reservation_ids)},
            ),
        )
        then = f"this stack scales {what} to zero now" if scale_function else f"scale {what} to zero now"
        message = events.RuleTargetInput.from_text(
            f"Capacity Block {events.EventField.from_path('$.detail.capacity-reservation-id')} ends at "
            f"{events.EventField.from_path('$.detail.end-date')}: EC2 starts terminating its instances in about 10 "
            f"minutes; {then} (set the blueprint's sizes to 0, or a new block, before the next deploy)"
        )
        self.rule.add_target(targets.SnsTopic(topic, message=message))
        if scale_function is not None:
            self.rule.add_target(targets.LambdaFunction(scale_function))
