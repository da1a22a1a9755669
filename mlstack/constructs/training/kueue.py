"""`Kueue`: the Kueue controller (Helm chart `versions.KUEUE`) and its queue manifests (`mlstack.k8s.kueue`).

The chart is installed with `wait` (its webhooks validate every Kueue object: they must answer before the queue
manifests are applied) after the Kubeflow Trainer chart (the TrainJob integration needs its CRD). Only workloads that
name a queue are managed (`manageJobsWithoutQueueName: false`), so the cluster's own pods never wait for quota.

Props (keyword): `cluster` (a `TrainingCluster`), `controller_config` (the controller's Configuration as YAML),
`manifests` (flavors, queues, priority classes), `namespace_manifest` (the job namespace, where the LocalQueues live).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from mlstack.constructs.training import versions
from mlstack.constructs.training.cluster import TrainingCluster

KUEUE_REPLICAS = 2
"""Controller replicas: the webhooks keep answering while one is rescheduled."""


class Kueue(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: TrainingCluster,
        controller_config: str,
        manifests: Sequence[dict[str, Any]],
        namespace_manifest: eks.KubernetesManifest,
    ) -> None:
        super().__init__(scope, construct_id)
        self.chart = cluster.add_chart(
            versions.KUEUE,
            {
                "controllerManager": {
                    # Its job, JobSet and TrainJob webhooks fail closed in every namespace but kube-system and
                    # kueue-system: with one replica no batch Job or JobSet can be created while it is rescheduled
                    # (a system-node rollout, say). Two replicas (leader election on; both serve the webhooks) on
                    # the two-AZ system nodes, and a disruption budget so a drain takes one at a time (chart
                    # values controllerManager.replicas / podDisruptionBudget, Kueue v0.19.2).
                    "replicas": KUEUE_REPLICAS,
                    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
                    "manager": {
                        "image": {
                            "repository": versions.KUEUE_IMAGE,
                            "tag": f"v{versions.KUEUE.version}",
                            "pullPolicy": "IfNotPresent",
                        }
                    },
                },
                "managerConfig": {"controllerManagerConfigYaml": controller_config},
            },
            wait=True,
        )
        self.chart.node.add_dependency(cluster.charts[versions.KUBEFLOW_TRAINER.release])
        self.manifest = cluster.add_manifest("KueueQueues", *manifests)
        self.manifest.node.add_dependency(self.chart)
        self.manifest.node.add_dependency(namespace_manifest)
