"""What Karpenter and Kueue add to the rendered TrainJob (engine eks): the job is created suspended in its team's
queue, so it starts only once Kueue admits all its nodes' worth of quota (gang admission), and its pods carry
`karpenter.sh/do-not-disrupt`, so Karpenter never voluntarily removes a node under a running job."""

from __future__ import annotations

from typing import Any

from mlstack.config.training import TrainingConfig
from mlstack.design.kueue import PREFERRED_LEVEL, PRIORITY_LABEL, QUEUE_LABEL, queues
from mlstack.k8s.karpenter import DO_NOT_DISRUPT

TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"


def elastic_job(training: TrainingConfig, runtime: dict[str, Any], job: dict[str, Any]) -> None:
    """Edit the TrainingRuntime and TrainJob documents in place (nothing to do without Karpenter or teams)."""
    pod_template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    annotations: dict[str, str] = {}
    if training.capacity_manager == "karpenter":
        annotations[DO_NOT_DISRUPT] = "true"
    design = queues(training)
    if design is not None:
        team = design.team(training.job.team)
        job["metadata"]["labels"] = {QUEUE_LABEL: team.local_queue, PRIORITY_LABEL: team.priority}
        # Kueue unsuspends the job when it admits it (Kueue docs, "Run a TrainJob"); created running, its pods
        # would start before admission.
        job["spec"]["suspend"] = True
        # The team's PriorityClass (preemptionPolicy Never): it orders pods for the kube-scheduler and Karpenter,
        # never evicts a running one; Kueue preempts, at admission, by the WorkloadPriorityClass above.
        pod_template["spec"]["priorityClassName"] = f"mlstack-{team.priority}"
        flavor = next((f for f in design.flavors if f.node_group == training.job_group.name), None)
        if flavor is not None and flavor.topology:
            annotations[TOPOLOGY_ANNOTATION] = PREFERRED_LEVEL
    if annotations:
        pod_template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
