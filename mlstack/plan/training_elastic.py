"""The elastic part of the training plan: Karpenter pools (resources, limits, $/h min and max per pool) and Kueue
team queues ($/h per team quota). No CDK import; the decisions are `mlstack.design.karpenter` / `.kueue`."""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.constructs.training import versions
from mlstack.design.footprint.elastic import KARPENTER_PARTS
from mlstack.design.footprint.parts import HELM_CHART, KUBERNETES_RESOURCE
from mlstack.design.karpenter import pools
from mlstack.design.kueue import PODS_READY_TIMEOUT_MINUTES, REQUEUE_LIMIT, longest_unready_hold_minutes, queues
from mlstack.plan.model import Plan, Resource

STACK = "TrainingClusterStack"


def _price(value: float | None) -> str:
    return "not priced offline" if value is None else f"${value:,.2f}/h"


def plan_elastic(config: BlueprintConfig, plan: Plan) -> list[tuple[str, list[str]]]:
    """Add the rows of Karpenter and Kueue to `plan`; return the plan sections they explain."""
    training = config.training
    if training is None:
        return []
    sections: list[tuple[str, list[str]]] = []
    found = pools(training, config.zones)
    if found:
        plan.resources += [Resource(STACK, "Karpenter", p.what, p.count, p.cfn_type) for p in KARPENTER_PARTS]
        rows = []
        for pool in found:
            overlay = " + NodeOverlay (huge pages)" if pool.efa else ""
            plan.resources.append(
                Resource(
                    STACK,
                    "Karpenter pool",
                    f"{pool.name}: EC2NodeClass + NodePool{overlay}, {', '.join(pool.instance_types)} in "
                    f"{', '.join(pool.zones)}, limit {pool.limit} {pool.accelerator_resource or 'accelerators'}",
                    type=KUBERNETES_RESOURCE,
                )
            )
            if pool.efa:
                plan.resources.append(Resource(STACK, "EFA security group", f"{pool.name}: all to/from itself"))
                if pool.placement_group:
                    plan.resources.append(Resource(STACK, "Placement group", f"{pool.name}: cluster strategy"))
            # No cost row: a pool starts empty ($0/h); its maximum, the limit's price, is the section's row.
            efa = "no EFA"
            if pool.interfaces is not None and pool.efa:
                efa = f"{sum(n.is_efa for n in pool.interfaces)} EFA devices per node (1 IP: ENA primary + efa-only)"
            elif pool.efa:
                efa = "EFA with an IP on every card (Karpenter's layout)"
            rows.append(
                f"{pool.name}: {', '.join(pool.instance_types)}, capacity {', '.join(pool.capacity_types)}, "
                f"{', '.join(pool.zones)}; limit {pool.limit} accelerators = max {pool.max_nodes} nodes; "
                f"$/h min $0.00, max {_price(pool.max_per_hour())}; {efa}"
            )
            rows.append(
                f"{pool.name}: disruption WhenEmpty after {pool.consolidate_after}, expireAfter Never, 0 nodes for "
                f"Drifted/Underutilized, terminationGracePeriod {pool.termination_grace_period}, job pods "
                "karpenter.sh/do-not-disrupt"
            )
        sections.append(("Karpenter pools", rows))
    design = queues(training)
    if design is not None:
        n = len(design.teams)
        plan.resources += [
            Resource(STACK, "Kueue", f"Kueue chart {versions.KUEUE.version}, 2 replicas", type=HELM_CHART),
            Resource(
                STACK,
                "Kueue queues",
                f"{len(design.flavors)} ResourceFlavor(s), {n} ClusterQueue(s) in cohort, {n} LocalQueue(s), "
                "3 WorkloadPriorityClasses + 3 PriorityClasses",
                type=KUBERNETES_RESOURCE,
            ),
        ]
        rows = []
        for team in design.teams:
            for q in team.quotas:
                borrow = "unlimited" if q.borrowing_limit is None else str(q.borrowing_limit)
                rows.append(
                    f"{team.name}: {q.nominal} {q.resource} on {q.flavor} (borrow up to {borrow}), weight "
                    f"{team.weight:g}, priority {team.priority}; queue {design.namespace}/{team.local_queue}; nominal "
                    f"quota in use {_price(q.per_hour())}"
                )
        topology = [f.name for f in design.flavors if f.topology]
        rows.append(
            "topology-aware scheduling (EKS network-node layers): "
            + (", ".join(topology) if topology else "off (Karpenter pools have no nodes before admission)")
        )
        rows.append(
            f"pods not all ready {PODS_READY_TIMEOUT_MINUTES} min after admission: evicted, requeued after a backoff, "
            f"deactivated after {REQUEUE_LIMIT} evictions (quota held at most {longest_unready_hold_minutes():.0f} min)"
        )
        sections.append(("Kueue team queues", rows))
    return sections
