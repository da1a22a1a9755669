"""The LeaderWorkerSet of a multi-node vLLM endpoint (no CDK import): one group of `pipeline_parallel` pods per
server, one pod per node, each with every GPU and every EFA interface of its node.

- API `leaderworkerset.x-k8s.io/v1` of the pinned LWS release (`versions.LWS`; tests validate against its CRD).
  LWS starts the leader and `size - 1` workers per group and sets `LWS_LEADER_ADDRESS` and `LWS_GROUP_SIZE` in
  each pod (LWS docs, "Concepts"); `RecreateGroupOnPodRestart` restarts the whole group when one pod fails, the
  only way a Ray cluster that lost a member serves again.
- The leader is the single-node server pod (`mlstack.k8s.vllm.server_deployment`'s template: API-key init
  container, weights volume, probes on /health) running the Ray head first (`serving_multinode.leader_script`);
  the workers run the same image and weights volume (each loads its own pipeline stage from it) and join the
  head. Both request the node's EFA interfaces and the 2 MiB huge pages EFA hosts reserve, and tolerate the EFA
  taint; the image (the AWS DLC vLLM image) carries the EFA libraries and aws-ofi-nccl (aws/deep-learning-containers
  docker/vllm/Dockerfile installs EFA 1.47.0), so NCCL between the stages uses EFA.
- The endpoint's Service selects the leaders only (the workers carry `app.kubernetes.io/name: vllm-worker`): the
  OpenAI API, /health and /metrics are served there. KEDA scales the LWS's groups through its scale subresource
  (`spec.replicas`; the KEDA chart's default `rbac.scaledRefKinds` lets the operator scale any kind that has one),
  so the manifest sets no `replicas` (an apply would reset KEDA's count).
- Stopping: the leader keeps the server's preStop drain (`mlstack.k8s.serving_drain`); the workers' hook waits for
  the leader's queue instead (their stages serve its requests until it has drained), within the same grace period.
"""

from __future__ import annotations

import copy
from typing import Any

from mlstack.design.serving_eks import ServerDesign
from mlstack.design.serving_multinode import RAY_PORT, leader_script, worker_script
from mlstack.k8s.job import HUGEPAGES_2MI
from mlstack.k8s.kube import EFA_TAINT
from mlstack.k8s.serving_drain import drain_lifecycle

__all__ = ["LWS_API", "leader_worker_set"]

LWS_API = "leaderworkerset.x-k8s.io/v1"


def _efa(pod: dict[str, Any], efa_interfaces: int) -> None:
    pod["tolerations"].append({"key": EFA_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    resources = pod["containers"][0]["resources"]
    for side in ("requests", "limits"):
        resources[side]["vpc.amazonaws.com/efa"] = str(efa_interfaces)
        resources[side]["hugepages-2Mi"] = HUGEPAGES_2MI


def leader_worker_set(deployment: dict[str, Any], design: ServerDesign, *, efa_interfaces: int) -> dict[str, Any]:
    """The LeaderWorkerSet that replaces `deployment` (the endpoint's single-node Deployment, same name, labels and
    pod template) for a server over `design.pipeline_parallel` nodes with `efa_interfaces` EFA devices each."""
    meta = deployment["metadata"]
    template = deployment["spec"]["template"]
    leader = copy.deepcopy(template)
    pod = leader["spec"]
    server = pod["containers"][0]
    serve = server["command"][2]
    server["command"] = ["/bin/sh", "-c", leader_script(serve), "--"]
    server["ports"].append({"name": "ray", "containerPort": RAY_PORT})
    _efa(pod, efa_interfaces)

    worker = copy.deepcopy(template)
    # Not the Service's labels: the endpoint's Service (and KEDA, through it) must reach the leaders only.
    worker["metadata"]["labels"]["app.kubernetes.io/name"] = "vllm-worker"
    wpod = worker["spec"]
    wpod.pop("initContainers")  # the workers serve no request: no API key
    wpod["volumes"] = [v for v in wpod["volumes"] if v["name"] != "api-key"]
    container = wpod["containers"][0]
    container["name"] = "vllm-worker"
    container["command"] = ["/bin/sh", "-c", worker_script()]
    container.pop("args")
    container["ports"] = [{"name": "ray", "containerPort": RAY_PORT}]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "api-key"]
    container["lifecycle"] = drain_lifecycle(design, leader=True)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container.pop(probe)  # the workers serve no HTTP; the leader's probes see the group fail
    _efa(wpod, efa_interfaces)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": copy.deepcopy(meta),
        "spec": {
            # Replace one group at a time, stopping it first (no spare nodes: as the Deployment's maxSurge 0).
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": design.pipeline_parallel,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
