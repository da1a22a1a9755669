"""The training stack's day-two part of `mlstack plan`: topic, dashboard, alarms, budget, Capacity Block rule
(`mlstack.design.operations`), and the budget against the blueprint's most expensive hour."""

from __future__ import annotations

from mlstack.catalog.prices import price as dated_price
from mlstack.config import BlueprintConfig
from mlstack.design.cost import budget_design, scale_to_zero_pools
from mlstack.design.observability import observability_design
from mlstack.design.operations import operations_resources
from mlstack.plan.model import Plan, Resource
from mlstack.workloads.resilience import DISRUPTION_RESTARTS


def plan_operations(config: BlueprintConfig, plan: Plan) -> None:
    """Rows, a section and warnings of the training stack's operations; nothing without training."""
    if config.training is None:
        return
    for row in operations_resources(config):
        plan.resources.append(Resource(row.stack, row.label, f"{row.cfn_type}: {row.detail}", row.count, row.cfn_type))
    design = observability_design(config)
    rows = [f"alarm {a.construct_id}: {a.description}" for a in design.alarms]
    rows += [f"composite alarm {a.construct_id}: {a.description}" for a in design.composite_alarms]
    rows += [f"not watched: {line}" for line in design.omitted]
    rows += restart_notes(config)
    rows += pool_notes(config)
    plan.details.setdefault("sections", []).append(("Operations", rows))
    plan.warnings.extend(budget_warnings(config, plan))


def max_per_hour(config: BlueprintConfig, plan: Plan) -> tuple[float, list[str]]:
    """The plan's standing $/h plus every node group grown from its standing count to max_size at the dated EC2
    on-demand price the plan uses; the groups it cannot price (Spot, Capacity Blocks, HyperPod, no dated price)."""
    training = config.training
    assert training is not None
    extra = 0.0
    unpriced: list[str] = []
    for group in training.node_groups:
        dated = dated_price(group.instance.name, "ec2_on_demand", config.env.region)
        price = dated.usd_per_hour if dated and group.capacity.type in ("on_demand", "capacity_reservation") else None
        if training.engine.startswith("hyperpod"):
            price = None  # HyperPod bills ml.* instances at SageMaker prices the catalog does not hold
        standing = 0 if training.engine == "batch" else group.desired_size
        if price is None:
            unpriced.append(group.name)
            continue
        extra += price * (group.max_size - standing)
    return plan.per_hour + extra, unpriced


def budget_warnings(config: BlueprintConfig, plan: Plan) -> list[str]:
    """A warning when the most expensive hour times `budget.expected_hours` is above `budget.monthly_usd`, and
    what the comparison leaves out."""
    budget = budget_design(config)
    if budget is None:
        return []
    top, unpriced = max_per_hour(config, plan)
    total = top * budget.expected_hours
    out = []
    if total > budget.monthly_usd:
        out.append(
            f"budget: at most ${top:,.2f}/hour x {budget.expected_hours:g} hours = ${total:,.0f}, above "
            f"budget.monthly_usd ${budget.monthly_usd:,.0f}: raise the budget, lower max_size or expected_hours"
        )
    if unpriced:
        out.append(f"budget: node groups {', '.join(unpriced)} have no price here; the comparison leaves them out")
    if budget.scale_to_zero_at_percent is not None and config.inference is not None:
        # A real-time endpoint's variant keeps at least one instance (UpdateEndpointWeightsAndCapacities and
        # application auto scaling take 1 as the minimum unless the endpoint hosts inference components).
        out.append(
            f"budget: the {budget.scale_to_zero_at_percent}% action scales training capacity only; the inference "
            "endpoints keep billing until `aws sagemaker delete-endpoint --endpoint-name <name>` (redeploy to restore)"
        )
    return out


def pool_notes(config: BlueprintConfig) -> list[str]:
    """What the budget's action does to each Karpenter NodePool, and the command that resumes it: a re-deploy
    re-applies a pool's manifest only when the manifest changed (CloudFormation updates changed properties only)."""
    budget = budget_design(config)
    if budget is None or budget.scale_to_zero_at_percent is None:
        return []
    return [
        f"budget action at {budget.scale_to_zero_at_percent}%: NodePool {pool.name} limits -> 0 (no new node), its "
        f"NodeClaims deleted (drained within terminationGracePeriod); resume: {pool.resume_command}"
        for pool in scale_to_zero_pools(config)
    ]


def restart_notes(config: BlueprintConfig) -> list[str]:
    """What the job's failure policy does not bound, one line each (`mlstack.workloads.resilience`)."""
    training = config.training
    assert training is not None
    if training.engine == "eks":
        return [
            "restarts: a disruption (drain, eviction, preemption, a node taken away) and a crash share one counter "
            f"(JobSet counts no rule separately): the job fails after job.max_retries ({training.job.max_retries}) + "
            f"{DISRUPTION_RESTARTS} restarts of any kind, so crashes alone may be retried up to that total",
            "restarts: JobSet v0.12 takes its rules in order over the Jobs failed when it acts, so a disruption "
            "(first rule: restart) outranks an application error (exit 42: fail) whatever failed first; a lost "
            "peer (exit 1) matches no rule, so an exit 42 whose peer fails before it costs one counted restart",
        ]
    if training.engine == "batch":
        return [
            "restarts: a multi-node job's retry strategy reads the main node's exit code; an application error "
            "(exit 42) on another node shows there as a lost peer (exit 1) and is retried, within the job's attempts"
        ]
    return []
