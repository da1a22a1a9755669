"""Kueue manifests of `mlstack.design.kueue.Queues` (kueue.x-k8s.io/v1beta2, the storage version of the chart pinned in
`constructs/training/versions.py`), and the controller configuration the chart takes as a string."""

from __future__ import annotations

from typing import Any

import yaml

from mlstack.design.kueue import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_MAX_SECONDS,
    COHORT,
    PODS_READY_TIMEOUT_MINUTES,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REQUEUE_LIMIT,
    TOPOLOGY,
    TOPOLOGY_LEVELS,
    UNMANAGED_RESOURCES,
    Queues,
    Team,
    priority_value,
)

API = "kueue.x-k8s.io/v1beta2"
PRIORITIES = ("inference", "training", "experiments")
__all__ = ["PRIORITY_LABEL", "QUEUE_LABEL", "controller_config", "queue_manifests"]


def controller_config() -> str:
    """`managerConfig.controllerManagerConfigYaml` of the chart: the chart's defaults, plus the Kubeflow Trainer
    integration, fair sharing (present = on in config v1beta2) and quotas on accelerators only."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10}},
        "clientConnection": {"qps": 50, "burst": 100},
        # Only workloads that name a queue are managed: the add-ons and device plugins never wait for quota.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]},
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        # All or nothing in time as well as in quota: an admitted job whose pods are not all ready in time (EC2 has
        # no capacity for one of its nodes, say) is evicted and requeued, so it does not hold the quota and the nodes
        # it got; after REQUEUE_LIMIT evictions it is deactivated instead of requeued forever (Kueue docs,
        # "Sequential admission with ready pods"; config v1beta2 RequeuingStrategy.backoffLimitCount).
        "waitForPodsReady": {
            "timeout": f"{PODS_READY_TIMEOUT_MINUTES}m",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": REQUEUE_LIMIT,
                "backoffBaseSeconds": BACKOFF_BASE_SECONDS,
                "backoffMaxSeconds": BACKOFF_MAX_SECONDS,
            },
        },
        "resources": {"excludeResourcePrefixes": list(UNMANAGED_RESOURCES)},
    }
    return yaml.safe_dump(config, sort_keys=False)


def _flavor(queues: Queues, name: str) -> dict[str, Any]:
    flavor = next(f for f in queues.flavors if f.name == name)
    spec: dict[str, Any] = {
        "nodeLabels": {"mlstack.io/node-group": flavor.node_group},
        "nodeTaints": [{"key": k, "value": "true", "effect": "NoSchedule"} for k in flavor.taints],
    }
    if flavor.topology:
        spec["topologyName"] = TOPOLOGY
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor.name}, "spec": spec}


def _cluster_queue(queues: Queues, team: Team) -> dict[str, Any]:
    groups: list[dict[str, Any]] = []
    for resource in sorted({q.resource for q in team.quotas}):
        flavors = []
        for q in (q for q in team.quotas if q.resource == resource):
            quota: dict[str, Any] = {"name": resource, "nominalQuota": q.nominal}
            if q.borrowing_limit is not None:
                quota["borrowingLimit"] = q.borrowing_limit
            flavors.append({"name": q.flavor, "resources": [quota]})
        groups.append({"coveredResources": [resource], "flavors": flavors})
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": team.cluster_queue},
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": queues.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": f"{team.weight:g}"},
            # A team gets its nominal quota back by preempting workloads that borrowed it, and a higher priority
            # preempts a lower one in its own queue; borrowing never preempts a team's own nominal use.
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": groups,
        },
    }


def queue_manifests(queues: Queues) -> list[dict[str, Any]]:
    """Priority classes, the topology, flavors, then per team its ClusterQueue and LocalQueue (creation order)."""
    docs: list[dict[str, Any]] = []
    for name in PRIORITIES:
        docs.append(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": priority_value(name),
                "description": f"mlstack: {name} workloads (inference > training > experiments)",
            }
        )
        docs.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"mlstack-{name}"},
                "value": priority_value(name),
                # The kube-scheduler never evicts running pods for these: Kueue decides preemption at admission.
                "preemptionPolicy": "Never",
                "globalDefault": False,
                "description": f"mlstack: {name} pods",
            }
        )
    if any(f.topology for f in queues.flavors):
        docs.append(
            {
                "apiVersion": API,
                "kind": "Topology",
                "metadata": {"name": TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]},
            }
        )
    docs += [_flavor(queues, f.name) for f in queues.flavors]
    for team in queues.teams:
        docs.append(_cluster_queue(queues, team))
        docs.append(
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": team.local_queue, "namespace": queues.namespace},
                "spec": {"clusterQueue": team.cluster_queue},
            }
        )
    return docs
