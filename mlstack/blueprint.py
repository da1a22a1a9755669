"""Build the stacks a blueprint asks for, into any scope (an App, or a Stage in a pipeline or a test)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack

if TYPE_CHECKING:
    from mlstack.stacks.ai_services import AiServicesStack
    from mlstack.stacks.data import DataStack
    from mlstack.stacks.inference import InferenceStack
    from mlstack.stacks.mlops import MlopsStack
    from mlstack.stacks.training import TrainingClusterStack


@dataclass(frozen=True)
class BuiltBlueprint:
    """The stacks of one blueprint, by their stable construct IDs."""

    config: BlueprintConfig
    network: NetworkStack
    training: TrainingClusterStack | MlStack | None = None
    """The `TrainingClusterStack` of any engine (`TrainingClusterStack` class for EKS, another `MlStack` otherwise)."""
    inference: InferenceStack | None = None
    data: DataStack | None = None
    mlops: MlopsStack | None = None
    ai_services: AiServicesStack | None = None
    eks_inference: MlStack | None = None
    """`inference: {engine: eks}`: the `InferenceStack` ID, an `EksInferenceStack`."""

    @property
    def stacks(self) -> list[MlStack]:
        layers = (
            self.network,
            self.data,
            self.training,
            self.inference,
            self.eks_inference,
            self.mlops,
            self.ai_services,
        )
        return [s for s in layers if s is not None]


def build(scope: Construct, config: BlueprintConfig) -> BuiltBlueprint:
    """Add the blueprint's stacks to `scope` (the ones `config.stack_ids` names; construct IDs are a contract)."""
    network = NetworkStack(scope, "NetworkStack", blueprint=config)
    training = inference = data = mlops = None
    eks_inference: MlStack | None = None
    if config.training is not None:
        from mlstack.stacks.training_engines import training_stack_class

        training = training_stack_class(config.training.engine)(
            scope, "TrainingClusterStack", blueprint=config, network=network
        )
    if config.inference is not None:
        from mlstack.stacks.data import DataStack
        from mlstack.stacks.inference import InferenceStack

        # The model bucket and image repository deploy first: they must be filled before a model can exist.
        data = DataStack(scope, "DataStack", blueprint=config, network=network)
        inference = InferenceStack(scope, "InferenceStack", blueprint=config, network=network, data=data)
    if config.inference_eks is not None:
        from mlstack.stacks.inference_eks import EksInferenceStack

        eks_inference = EksInferenceStack(scope, "InferenceStack", blueprint=config, network=network)
    if config.mlops is not None:
        from mlstack.stacks.mlops import MlopsStack

        mlops = MlopsStack(scope, "MlopsStack", blueprint=config, network=network)
    ai_services = None
    if config.ai_services is not None:
        from mlstack.stacks.ai_services import AiServicesStack

        ai_services = AiServicesStack(scope, "AiServicesStack", blueprint=config, network=network)
    return BuiltBlueprint(
        config=config,
        network=network,
        training=training,
        inference=inference,
        data=data,
        mlops=mlops,
        ai_services=ai_services,
        eks_inference=eks_inference,
    )
