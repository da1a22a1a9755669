"""The PodDisruptionBudget that keeps node-group updates from evicting a running training job (no CDK import)."""

from __future__ import annotations

from typing import Any

__all__ = ["JOB_BUDGET", "job_disruption_budget"]

JOB_BUDGET = "training-jobs"
"""Name of the PodDisruptionBudget on every job pod of the job namespace (`job_disruption_budget`)."""


def job_disruption_budget(namespace: str) -> dict[str, Any]:
    """A PodDisruptionBudget that refuses every eviction of a running job's pods: a node-group update (which drains
    nodes through the eviction API, force update off) then fails instead of killing a job.

    It selects every JobSet pod of the namespace (Kubeflow Trainer runs TrainJobs as JobSets, which label their pods
    `jobset.sigs.k8s.io/jobset-name`). Job pods have no scale subresource, so only an integer `minAvailable` applies
    (Kubernetes docs, "Specifying a Disruption Budget for your Application", arbitrary controllers); one above any
    job's pod count makes the allowed disruptions 0. `unhealthyPodEvictionPolicy: AlwaysAllow` still lets a drain
    evict pods that are not Ready (a broken node's), so node repair is not blocked by a dead job.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": JOB_BUDGET, "namespace": namespace},
        "spec": {
            "minAvailable": 100000,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]},
        },
    }
