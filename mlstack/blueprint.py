"""Build the stacks a blueprint asks for, into any scope (an App, or a Stage in a pipeline or a test)."""

from __future__ import annotations

from dataclasses import dataclass

from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack


@dataclass(frozen=True)
class BuiltBlueprint:
    """The stacks of one blueprint, by their stable construct IDs."""

    config: BlueprintConfig
    network: NetworkStack

    @property
    def stacks(self) -> list[MlStack]:
        return [self.network]


def stack_ids(config: BlueprintConfig) -> list[str]:
    """The stacks `build` creates for `config`, in deployment order, without building them."""
    return ["NetworkStack"]


def build(scope: Construct, config: BlueprintConfig) -> BuiltBlueprint:
    """Add the blueprint's stacks to `scope`. Construct IDs are a contract: `NetworkStack`, ..."""
    network = NetworkStack(scope, "NetworkStack", blueprint=config)
    return BuiltBlueprint(config=config, network=network)
