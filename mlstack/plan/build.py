"""`build_plan`: each layer module adds its part of the plan for the layers the blueprint has."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path

from mlstack.catalog.price_check import age_warnings
from mlstack.config import BlueprintConfig
from mlstack.design.footprint import footprint
from mlstack.plan.ai_services import plan_ai_services
from mlstack.plan.inference import plan_inference
from mlstack.plan.inference_eks import plan_inference_eks
from mlstack.plan.mlops import plan_mlops
from mlstack.plan.model import Plan
from mlstack.plan.network import plan_network
from mlstack.plan.operations import plan_operations
from mlstack.plan.supporting import add_supporting
from mlstack.plan.training import plan_training
from mlstack.plan.training_engines import plan_training_engine


def build_plan(
    config: BlueprintConfig, today: dt.date | None = None, serve_checks: Mapping[str, Path] | None = None
) -> Plan:
    """The plan of `config`; prices older than 90 days before `today` (default: the clock's day) are named;
    `serve_checks`: `mlstack serve-check` reports by endpoint (`mlstack.plan.serving`)."""
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
    # A rate without a date never prices the plan (every catalog row is dated; this holds any other source to it).
    plan.costs = [
        dataclasses.replace(c, unit_per_hour=None, source=f"rate has no date, not used ({c.source})")
        if c.unit_per_hour is not None and not c.price_date
        else c
        for c in plan.costs
    ]
    priced = [(c.item, c.price_date) for c in plan.costs if c.unit_per_hour is not None]
    plan.warnings.extend(age_warnings(priced, today or dt.date.today()))
    # Last: the budget is compared with every layer's (dated) costs.
    plan_operations(config, plan)
    add_supporting(plan, footprint(config))
    return plan
