"""`MlStack`: what every mlstack stack shares (name, environment, AZs without lookups, removal policy)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, RemovalPolicy, Stack, Tags
from constructs import Construct

from mlstack.config import BlueprintConfig


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
        """RETAIN (DeletionPolicy and UpdateReplacePolicy) unless the blueprint opts in to `removal: destroy`."""
        return RemovalPolicy.RETAIN if self.blueprint.retain else RemovalPolicy.DESTROY
