"""`build_plan`: each layer module adds its part of the plan for the layers the blueprint has."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlstack.config import BlueprintConfig
from mlstack.plan.ai_services import plan_ai_services
from mlstack.plan.inference import plan_inference
from mlstack.plan.inference_eks import plan_inference_eks
from mlstack.plan.mlops import plan_mlops
from mlstack.plan.model import Plan
from mlstack.plan.network import plan_network
from mlstack.plan.training import plan_training
from mlstack.plan.training_engines import plan_training_engine


def build_plan(config: BlueprintConfig, serve_checks: Mapping[str, Path] | None = None) -> Plan:
    """The plan of `config`; `serve_checks`: `mlstack serve-check` reports by endpoint (`mlstack.plan.serving`)."""
    plan = Plan(
        blueprint=config.name,
        description=config.description,
        region=config.env.region,
        removal=config.removal,
        stacks=config.stack_ids,
    )
    plan_network(config, plan)
    if config.training is not None and config.training.engine != "eks":
        plan_training_engine(config, plan)
    elif config.training is not None:
        plan_training(config, plan)
    if config.inference is not None:
        plan_inference(config, plan, serve_checks)
    if config.inference_eks is not None:
        plan_inference_eks(config, plan, serve_checks)
    if config.mlops is not None:
        plan_mlops(config, plan)
    if config.ai_services is not None:
        plan_ai_services(config, plan)
    return plan
