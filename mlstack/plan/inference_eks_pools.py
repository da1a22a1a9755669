"""The node autoscaling part of the `engine: eks` plan: Karpenter's resources and one pool per endpoint (limit,
disruption, $/h at the fewest and most nodes), and the cold start of a server on a new node. No CDK import; the
decisions are `mlstack.design.serving_pools`."""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.design.footprint.elastic import KARPENTER_PARTS
from mlstack.design.footprint.parts import KUBERNETES_RESOURCE
from mlstack.design.serving_eks import ServerDesign, server_designs
from mlstack.design.serving_pools import (
    NODE_LAUNCH_S,
    blocks_drift,
    drain_seconds,
    server_startup_seconds,
    serving_pools,
    termination_grace_seconds,
)
from mlstack.k8s.serving_pools import SERVING_DISRUPTION_BUDGET
from mlstack.plan.model import HOURS_PER_MONTH, Plan, Resource

STACK = "InferenceStack"


def _price(value: float | None) -> str:
    return "not priced offline" if value is None else f"${value:,.2f}/h"


def plan_serving_pools(config: BlueprintConfig, plan: Plan) -> dict[str, list[str]]:
    """Add Karpenter's rows to `plan` (none with fixed node groups); return each endpoint's extra section rows."""
    eks = config.inference_eks
    if eks is None:
        return {}
    found = serving_pools(eks, config.zones)
    if not found:
        return {}
    plan.resources += [Resource(STACK, "Karpenter", p.what, p.count, p.cfn_type) for p in KARPENTER_PARTS]
    rows: dict[str, list[str]] = {}
    designs = {d.endpoint: d for d in server_designs(eks)}
    for pool in found:
        drift = (
            "drift kept (budget 0 for Drifted: fewer than 2 servers; new nodes get the new AMI)"
            if blocks_drift(designs[pool.name])
            else "drift replaced"
        )
        plan.resources.append(
            Resource(
                STACK,
                "Karpenter pool",
                f"{pool.name}: EC2NodeClass + NodePool, {', '.join(pool.instance_types)} in {', '.join(pool.zones)}, "
                f"limit {pool.limit} {pool.accelerator_resource}",
                type=KUBERNETES_RESOURCE,
            )
        )
        rows[pool.name] = [
            f"Karpenter pool {pool.name}: {', '.join(pool.instance_types)}, capacity {', '.join(pool.capacity_types)}, "
            f"{', '.join(pool.zones)}; limit {pool.limit} {pool.accelerator_resource} = max {pool.max_nodes} node(s) "
            "(the cost cap: no node past it)",
            f"disruption WhenEmptyOrUnderutilized after {pool.consolidate_after}, {drift}, "
            f"{SERVING_DISRUPTION_BUDGET} node at a time; terminationGracePeriod {pool.termination_grace_period}",
        ]
    return rows


def pool_cost_row(design: ServerDesign, hourly: float | None, pooled: bool) -> str | None:
    """$/h of the endpoint's GPU nodes at min and max replicas (a pool launches between the two)."""
    if hourly is None:
        return None
    low, high = hourly * design.min_nodes, hourly * design.max_nodes
    what = "Neuron nodes" if design.accelerator == "neuron" else "GPU nodes"
    if not pooled:
        return f"{what}: ${low:,.2f}/h (${low * HOURS_PER_MONTH:,.0f}/month) at {design.min_nodes} node(s), fixed"
    return (
        f"{what}: ${low:,.2f}/h at {design.min_nodes} node(s) (min_replicas {design.min_replicas}) to "
        f"${high:,.2f}/h at {design.max_nodes} (max_replicas {design.max_replicas}); on-demand"
    )


def drain_rows(design: ServerDesign, weights_gib: float, pooled: bool) -> list[str]:
    """How a server stops and how long a new one takes."""
    rows = [
        f"a stopping server drains first: preStop waits until vLLM has no running or waiting request (at most "
        f"{drain_seconds(design)} s), terminationGracePeriodSeconds {termination_grace_seconds(design)}; "
        "PodDisruptionBudget maxUnavailable 1"
    ]
    start = server_startup_seconds(design, weights_gib)
    node = f"node launch and join (~{NODE_LAUNCH_S // 60} min, estimate) + " if pooled else ""
    last = (
        "the Neuron compilation"
        if design.accelerator == "neuron"
        else "CUDA graphs" + (", the workers' start and Ray join" if design.pipeline_parallel > 1 else "")
    )
    rows.append(
        f"cold start of a server: {node}image pull, {weights_gib:,.0f} GiB of weights through Mountpoint and {last} "
        f"(startup probe allows {start // 60} min): up to ~{(start + (NODE_LAUNCH_S if pooled else 0)) // 60} "
        "min before it takes requests"
    )
    return rows
