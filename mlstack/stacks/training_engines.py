"""Which stack class builds `TrainingClusterStack` for each `training.engine` (the construct ID never changes)."""

from __future__ import annotations

from typing import Any, Protocol

from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack


class TrainingStackClass(Protocol):
    def __call__(
        self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, network: NetworkStack, **kwargs: Any
    ) -> MlStack: ...


def training_stack_class(engine: str) -> TrainingStackClass:
    """The stack class of `engine` (imported on demand: a blueprint pays only for the engine it uses)."""
    if engine == "hyperpod-slurm":
        from mlstack.stacks.training_hyperpod import HyperPodTrainingStack

        return HyperPodTrainingStack
    if engine == "batch":
        from mlstack.stacks.training_batch import BatchTrainingStack

        return BatchTrainingStack
    from mlstack.stacks.training import TrainingClusterStack

    return TrainingClusterStack
