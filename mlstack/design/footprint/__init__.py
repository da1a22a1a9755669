"""What CloudFormation resources each stack of a blueprint holds, by type: `footprint(config)`.

Each construct's resource set is written once, in `parts` (one function per construct, of the props that change
it), and each stack's in the module of its layer. The plan lists these (`mlstack plan --json`: type, stack,
count), and tests/plan/test_footprint.py holds them equal to every shipped blueprint's synthesized templates, so
a construct that adds or drops a resource shows up as a failing test instead of a plan that silently drifts.
"""

from __future__ import annotations

from collections import Counter

from mlstack.config import BlueprintConfig
from mlstack.design.footprint.ai_services import ai_services_stack
from mlstack.design.footprint.inference import data_stack, eks_inference_stack, inference_stack
from mlstack.design.footprint.mlops import mlops_stack
from mlstack.design.footprint.network import network_stack
from mlstack.design.footprint.operations import operations_stack
from mlstack.design.footprint.training import training_stack

__all__ = ["footprint"]


def footprint(config: BlueprintConfig) -> dict[str, Counter[str]]:
    """Stack construct ID -> CloudFormation type -> how many resources of it the stack's template holds."""
    stacks: dict[str, Counter[str]] = {"NetworkStack": network_stack(config)}
    if config.training is not None:
        stacks["TrainingClusterStack"] = training_stack(config, config.training)
        for stack, types in operations_stack(config).items():
            stacks[stack] = stacks.get(stack, Counter()) + types
    if config.inference is not None:
        stacks["DataStack"] = data_stack(config.inference)
        stacks["InferenceStack"] = inference_stack(config.inference)
    if config.inference_eks is not None:
        stacks["InferenceStack"] = eks_inference_stack(config.inference_eks)
    if config.mlops is not None:
        stacks["MlopsStack"] = mlops_stack(config.mlops)
    if config.ai_services is not None:
        stacks["AiServicesStack"] = ai_services_stack(config.ai_services)
    return stacks
