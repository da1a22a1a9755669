"""`TrainingEngineStack`: what the four `TrainingClusterStack` engines share (EKS, HyperPod on Slurm or EKS, Batch)."""

from __future__ import annotations

from typing import Any

from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack


class TrainingEngineStack(MlStack):
    """A training stack: the blueprint's `training:` section (`self.training`, required) in the network's VPC."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        description: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, blueprint=blueprint, description=description, **kwargs)
        if blueprint.training is None:
            raise ValueError(f"blueprint {blueprint.name!r} has no training section")
        self.training: TrainingConfig = blueprint.training
        self.network_stack = network
