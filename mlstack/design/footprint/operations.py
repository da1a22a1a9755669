"""The training stack's day-two resources (alarm topic, dashboard, alarms, step-line metric filters, budget,
Capacity Block rule, scale-to-zero functions), by type: `mlstack.design.operations.operations_resources`, the rows
the plan describes them with, counted once here too so the footprint holds every resource of the stack."""

from __future__ import annotations

from collections import Counter

from mlstack.config import BlueprintConfig
from mlstack.design.footprint.parts import Footprint
from mlstack.design.operations import operations_resources


def operations_stack(config: BlueprintConfig) -> dict[str, Footprint]:
    """Stack construct ID -> CloudFormation type -> count of `add_operations`'s resources; {} without training."""
    found: dict[str, Footprint] = {}
    for row in operations_resources(config):
        found.setdefault(row.stack, Counter())[row.cfn_type] += row.count
    return found
