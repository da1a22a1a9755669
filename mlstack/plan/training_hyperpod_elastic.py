"""The hyperpod-eks part of the plan for `teams:` (HyperPod task governance: $/h per team quota) and `capacity_manager:
karpenter` (HyperPod autoscaling: $/h from 0 nodes to max_size). No CDK import; the decisions are
`mlstack.design.hyperpod_governance`. HyperPod bills ml.* instances at SageMaker HyperPod rates: priced from the
catalog's dated `hyperpod` rows, else "not priced offline" with the reason, never at the EC2 rate."""

from __future__ import annotations

from mlstack.catalog.quotes import Quote, instance_quote
from mlstack.config import BlueprintConfig
from mlstack.constructs.training import versions
from mlstack.design.footprint.elastic import ADDON, COMPUTE_QUOTA, SCHEDULER_CONFIG
from mlstack.design.footprint.parts import KUBERNETES_RESOURCE, POLICY
from mlstack.design.hyperpod_governance import autoscaling, governance
from mlstack.plan.model import Plan, Resource

STACK = "TrainingClusterStack"
READY = "Custom::HyperPodAutoscalingReady"


def _price(quote: Quote, nodes: int) -> str:
    if quote.usd is None:
        return f"not priced offline ({quote.source})"
    return f"${quote.usd * nodes:,.2f}/h"


def _price_hours(quote: Quote, node_hours: float) -> str:
    if quote.usd is None:
        return f"{node_hours:g} node-hours (not priced offline)"
    return f"${quote.usd * node_hours:,.2f} ({node_hours:g} node-hours)"


def plan_hyperpod_elastic(config: BlueprintConfig, plan: Plan) -> list[tuple[str, list[str]]]:
    """Add the rows of task governance and autoscaling to `plan`; return the sections they explain."""
    training = config.training
    if training is None:
        return []
    region = config.env.region
    sections: list[tuple[str, list[str]]] = []
    scaling = autoscaling(training)
    if scaling is not None:
        plan.resources += [
            Resource(STACK, "IAM role", "HyperPod autoscaling cluster role (hyperpod.sagemaker.amazonaws.com)"),
            Resource(
                STACK,
                "IAM role policy",
                "BatchAddClusterNodes/BatchDeleteClusterNodes on this account's clusters, volume-key grants via "
                "SageMaker",
                type=POLICY,
            ),
            Resource(
                STACK,
                "HyperPod autoscaling wait",
                "the pools wait for DescribeCluster AutoScaling.Status InService (checked each minute, 45 min "
                "limit), then for the HyperpodNodeClass CRD (kubectl get, 10 min)",
                type=READY,
            ),
            Resource(
                STACK,
                "HyperPod pools",
                f"{len(scaling.max_nodes)} HyperpodNodeClass + NodePool (managed Karpenter)",
                type=KUBERNETES_RESOURCE,
            ),
        ]
        rows = [
            "HyperPod cluster: AutoScaling Enable (Karpenter), NodeProvisioningMode Continuous, NodeRecovery "
            "Automatic; instance groups start at 0 nodes, HyperPod runs the Karpenter controller"
        ]
        for group, ml, max_nodes in scaling.max_nodes:
            quote = instance_quote(ml, region, "hyperpod")
            rows.append(
                f"{group}: {ml}, 0 to {max_nodes} nodes; $/h min $0.00, max {_price(quote, max_nodes)}; NodePool "
                f"WhenEmpty after {scaling.consolidate_after_minutes}m, expireAfter Never, 0 nodes for "
                f"Drifted/Underutilized, terminationGracePeriod {scaling.termination_grace_period_minutes}m, job pods "
                "karpenter.sh/do-not-disrupt"
            )
            idle = _price_hours(quote, max_nodes * scaling.consolidate_after_minutes / 60)
            rows.append(
                f"{group} idle after each job: up to {max_nodes} nodes stay {scaling.consolidate_after_minutes}m "
                f"before Karpenter removes them (a next job reuses them), at most {idle} per job"
            )
        rows.append(
            f"health-monitoring agent {versions.HYPERPOD_HEALTH_AGENT} (HyperPod chart; autoscaling needs "
            "1.0.742.0_1.0.241.0 or later)"
        )
        sections.append(("HyperPod autoscaling", rows))
    design = governance(training)
    if design is not None:
        classes = ", ".join(f"{n} {w}" for n, w in design.priority_classes)
        plan.resources += [
            Resource(
                STACK,
                "EKS add-on",
                f"{design.addon} {versions.HYPERPOD_TASK_GOVERNANCE_VERSION} (installs Kueue)",
                type=ADDON,
            ),
            Resource(
                STACK,
                "HyperPod cluster policy",
                f"priority classes {classes}; fair share on, idle compute shared",
                type=SCHEDULER_CONFIG,
            ),
            Resource(
                STACK,
                "HyperPod compute allocation",
                ", ".join(t.name for t in design.teams),
                len(design.teams),
                type=COMPUTE_QUOTA,
            ),
        ]
        rows = []
        for team in design.teams:
            for a in team.allocations:
                borrow = "unlimited" if a.borrow is None else str(a.borrow)
                rows.append(
                    f"{team.name}: {a.accelerators} accelerators, {a.vcpu} vCPU, {a.memory_gib} GiB of "
                    f"{a.instance_type} (borrow up to {borrow}, "
                    f"{team.strategy}), weight {team.weight}, priority {team.priority_class}; queue "
                    f"{team.namespace}/{team.local_queue}; quota in use ({a.nodes} nodes) "
                    f"{_price(a.quote(region), a.nodes)}"
                )
        rows.append(
            "task governance creates each team's namespace, LocalQueue and priority classes; a job carries the "
            "labels kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class"
        )
        sections.append(("HyperPod task governance", rows))
    return sections
