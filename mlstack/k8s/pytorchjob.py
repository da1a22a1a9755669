"""The example job on engine hyperpod-eks: a Kubeflow `PyTorchJob` that HyperPod's job auto-resume restarts.

HyperPod resumes a job after a node fault when it is a PyTorchJob of the Kubeflow Training Operator (which the
HyperPod dependencies chart installs), carries the annotations `sagemaker.amazonaws.com/enable-job-auto-resume:
"true"` and `sagemaker.amazonaws.com/job-max-retry-count`, restarts its replicas `OnFailure`, and runs in the
`kubeflow` namespace or one whose name starts with `hyperpod`; the guide also selects nodes whose
`sagemaker.amazonaws.com/node-health-status` is `Schedulable` (SageMaker HyperPod docs, "Running jobs using
kubectl", "To enable job auto-resume", and "Running jobs using the SageMaker HyperPod CLI"). The Kubeflow Trainer
`TrainJob` of the eks engine is not a type auto-resume knows.

The pod is the eks engine's (`mlstack.k8s.job.pod_spec`): same requests, EFA, FSx, environment and script, except
no huge pages under task governance or HyperPod autoscaling (`without_huge_pages`). The
operator gives each pod PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE and, with a Master replica, MASTER_ADDR and
MASTER_PORT (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go), which torchrun's command line takes.
"""

from __future__ import annotations

import copy
from typing import Any

from mlstack.config.training import TrainingConfig
from mlstack.config.training_hyperpod_rules import hyperpod_autoscaling
from mlstack.design.hyperpod_governance import governance
from mlstack.design.kueue import PRIORITY_LABEL, QUEUE_LABEL

AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
_HEALTHY = {
    "weight": 100,
    "preference": {"matchExpressions": [{"key": HEALTH_LABEL, "operator": "In", "values": ["Schedulable"]}]},
}
CONTAINER = "pytorch"
"""The container name the training operator looks for (its default port and environment go there)."""


HUGE_PAGES = "hugepages-2Mi"


def managed_schedulers(training: TrainingConfig) -> bool:
    """A scheduler this stack cannot configure decides on the job's pods: task governance's Kueue (its configuration
    is SageMaker's; a ComputeQuota covers accelerators, vCPU and memory only) or HyperPod's managed Karpenter (no
    NodeOverlay or feature gate that would tell it a node's huge pages)."""
    return governance(training) is not None or hyperpod_autoscaling(training)


def without_huge_pages(pod: dict[str, Any]) -> None:
    """No huge-pages request, and libfabric's EFA provider told to use regular pages for its buffers
    (`FI_EFA_USE_HUGE_PAGE=0`, libfabric fi_efa(7) man page): Kueue marks a workload inadmissible when it requests a
    resource its ClusterQueue does not cover, and Karpenter launches no node for a resource it does not model. The
    EFA devices stay requested (the device plugin's resource, which both know from the node)."""
    for container in pod["containers"]:
        resources = container.get("resources", {})
        if not any(HUGE_PAGES in resources.get(k, {}) for k in ("requests", "limits")):
            continue
        for kind in ("requests", "limits"):
            resources.get(kind, {}).pop(HUGE_PAGES, None)
        container["env"] = [*container.get("env", []), {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"}]


def render_pytorchjob(training: TrainingConfig, pod: dict[str, Any]) -> dict[str, Any]:
    """The PyTorchJob: one Master (node rank 0) and `nodes - 1` Workers, each pod `pod`."""
    nodes = training.job.nodes or training.job_group.max_size
    pod = copy.deepcopy(pod)
    if managed_schedulers(training):
        without_huge_pages(pod)
    if hyperpod_autoscaling(training):
        # Karpenter launches a node for a pending pod only when the pool's nodes would carry every label the pod
        # requires, and HyperPod's health agent sets this one after the node joins: a preference, not a selector.
        pod["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [_HEALTHY]}}
    else:
        pod["nodeSelector"] = {**pod["nodeSelector"], HEALTH_LABEL: "Schedulable"}
    container = pod["containers"][0]
    container["name"] = CONTAINER
    command = container["command"]
    at = next(i for i, arg in enumerate(command) if arg.startswith("--nproc-per-node="))
    nproc = command[at]
    # $(VAR) is expanded by the kubelet from the container's environment, where the operator puts these.
    container["command"] = [
        *command[: at + 1],
        "--nnodes=$(PET_NNODES)",
        "--node-rank=$(PET_NODE_RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        *command[at + 1 :],
    ]
    template: dict[str, Any] = {"spec": pod}
    if hyperpod_autoscaling(training):
        # Karpenter never drains a node for consolidation while a pod with this annotation runs on it.
        template["metadata"] = {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)}
    }
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": "OnFailure", "template": template}
    metadata: dict[str, Any] = {
        "name": training.job.name,
        "namespace": training.job.namespace,
        "annotations": {AUTO_RESUME: "true", MAX_RETRY: str(training.job.max_retries)},
    }
    governed = governance(training)
    if governed is not None:
        # HyperPod task governance queues the job in its team's LocalQueue at the team's priority class (SageMaker
        # HyperPod docs, "Example HyperPod task governance AWS CLI commands": both labels on the job).
        team = governed.team(training.job.team)
        metadata["labels"] = {QUEUE_LABEL: team.local_queue, PRIORITY_LABEL: team.priority_class}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "nprocPerNode": nproc.split("=", 1)[1],
            "pytorchReplicaSpecs": replicas,
            # OnFailure restarts a crashed container in place, an application error too: without a limit it would
            # crash-loop (and bill) forever. After `max_retries` restarts the operator fails the job
            # (kubeflow.org/v1 RunPolicy.backoffLimit); node faults are HyperPod auto-resume's.
            "runPolicy": {"backoffLimit": training.job.max_retries},
        },
    }
