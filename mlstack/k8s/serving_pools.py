"""Kubernetes manifests of EKS serving autoscaling (no CDK import): the Karpenter pool of an endpoint with the
serving disruption rules, the servers' PodDisruptionBudget, and the ScaledObject triggers of scale-to-zero.

- Pool: the training layer's EC2NodeClass and NodePool (`mlstack.k8s.karpenter`) with the disruption of a stateless
  server fleet: consolidation `WhenEmptyOrUnderutilized` after `consolidateAfter`, one node at a time for every
  reason (a budget of `nodes: "1"`), so an empty node goes and drift (a new AMI) replaces nodes one by one; Karpenter
  evicts the servers through the Eviction API (PodDisruptionBudgets respected) and each drains first (its preStop
  hook, `mlstack.k8s.serving_drain`). Karpenter docs v1.14, "Disruption" (consolidation, budgets, drift).
- PodDisruptionBudget: at most one server of the endpoint unavailable through evictions, so a drained node's
  servers leave one at a time, each after its replacement is ready; a server that is not ready may always be
  evicted (`unhealthyPodEvictionPolicy: AlwaysAllow`), so a stuck one never blocks a node's drain.
- Busy servers: a second metrics-api trigger on `vllm:num_requests_running` (target: a server's full batch,
  `--max-num-seqs`) keeps as many servers as the running requests fill, so a queue that empties does not remove a
  busy server, and it keeps a scale-to-zero endpoint active while any request runs.
- Scale to zero: KEDA's `cron` trigger (KEDA docs, Scalers: Cron) runs `active_hours.replicas` servers in the window;
  outside it the endpoint goes to zero `cooldownPeriod` seconds after the last request ran or waited.
"""

from __future__ import annotations

import copy
from typing import Any

from mlstack.config.inference_eks_pools import ActiveHoursConfig
from mlstack.design.karpenter import Pool
from mlstack.design.serving_eks import ServerDesign
from mlstack.k8s.karpenter import NodeClassRefs, pool_manifests
from mlstack.k8s.vllm import SCALE_IN_WINDOW_S

__all__ = ["SERVING_DISRUPTION_BUDGET", "disruption_budget", "serving_pool_manifests", "serving_triggers"]

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""The label LeaderWorkerSet puts on every pod of a set (LWS docs, "Concepts": labels)."""
SERVING_DISRUPTION_BUDGET = "1"
"""Nodes of a pool Karpenter may disrupt at once, for any reason."""


def serving_pool_manifests(pool: Pool, refs: NodeClassRefs, *, block_drift: bool = False) -> list[dict[str, Any]]:
    """The endpoint's EC2NodeClass and NodePool, with the serving disruption rules; `block_drift` (default False)
    keeps drifted nodes (Karpenter docs v1.14, "Disruption": budgets with `reasons`)."""
    docs = pool_manifests(pool, refs)
    budgets: list[dict[str, Any]] = [{"nodes": SERVING_DISRUPTION_BUDGET}]
    if block_drift:
        budgets.append({"nodes": "0", "reasons": ["Drifted"]})
    for doc in docs:
        if doc["kind"] == "NodePool":
            doc["spec"]["disruption"] = {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": pool.consolidate_after,
                "budgets": copy.deepcopy(budgets),
            }
    return docs


def disruption_budget(deployment: dict[str, Any]) -> dict[str, Any]:
    """The PodDisruptionBudget of the servers of `deployment` (same name and namespace): a Deployment's selector, or
    every pod of a LeaderWorkerSet (leaders and workers; an evicted worker restarts its whole group)."""
    meta = deployment["metadata"]
    selector = (
        copy.deepcopy(deployment["spec"]["selector"])
        if deployment["kind"] == "Deployment"
        else {"matchLabels": {LWS_NAME_LABEL: meta["name"]}}
    )
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels", {}))},
        "spec": {
            "maxUnavailable": 1,
            "selector": selector,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def serving_triggers(
    scaled: dict[str, Any], design: ServerDesign, *, model_name: str, active_hours: ActiveHoursConfig | None
) -> dict[str, Any]:
    """`scaled` (the endpoint's ScaledObject) with the running-requests trigger and, with `active_hours`, the cron
    trigger and the cooldown of scale-to-zero."""
    out = copy.deepcopy(scaled)
    spec = out["spec"]
    (queue,) = spec["triggers"]
    running = copy.deepcopy(queue)
    running["metadata"]["valueLocation"] = f'vllm:num_requests_running{{model_name="{model_name}"}}'
    running["metadata"]["targetValue"] = str(design.max_num_seqs)
    spec["triggers"].append(running)
    if active_hours is not None:
        spec["cooldownPeriod"] = SCALE_IN_WINDOW_S
        spec["triggers"].append(
            {
                "type": "cron",
                "metadata": {
                    "timezone": active_hours.timezone,
                    "start": active_hours.start,
                    "end": active_hours.end,
                    "desiredReplicas": str(active_hours.replicas),
                },
            }
        )
    return out
