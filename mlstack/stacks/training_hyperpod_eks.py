"""`TrainingClusterStack` for `training.engine: hyperpod-eks`: the training layer's EKS cluster (system nodes,
add-ons, Kubeflow Trainer) whose accelerated nodes are SageMaker HyperPod instance groups from
`training.node_groups`, FSx for Lustre through the CSI driver, the example job as a PyTorchJob HyperPod
auto-resumes (`mlstack.k8s.pytorchjob`), in the image the deploy builds.

One deploy: HyperPod needs its dependencies Helm chart on the cluster before its nodes join, and the chart is a
folder of aws/sagemaker-hyperpod-cli with local `file://` sub-charts (no chart repository), which CDK's Helm
handler cannot install. `HyperPodDependencies` installs it from the pinned commit's archive (digest checked), and
the HyperPod cluster waits for it.

Its part of `mlstack plan` is `mlstack.plan.training_engines`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.config.training_engines import HyperPodConfig
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.hyperpod import HyperPodCluster, HyperPodInstanceGroup
from mlstack.constructs.training.hyperpod_chart import HyperPodDependencies
from mlstack.design.host_metrics import host_agent
from mlstack.design.hyperpod_governance import autoscaling, continuous_provisioning, governance
from mlstack.k8s.job import FSX_CLAIM
from mlstack.k8s.kube import LABEL_PREFIX
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training import admin_host, cluster_props, fsx_props
from mlstack.stacks.training_base import TrainingEngineStack
from mlstack.stacks.training_hyperpod import FSX_MOUNT_PATH, volume_encryption, worker_groups
from mlstack.stacks.training_hyperpod_elastic import add_hyperpod_pools, add_task_governance
from mlstack.stacks.training_image import add_first_job
from mlstack.stacks.training_ops import add_operations


def eks_cluster(
    scope: Construct,
    blueprint: BlueprintConfig,
    network: NetworkStack,
    training: TrainingConfig,
    *,
    removal_policy: RemovalPolicy,
) -> TrainingCluster:
    """The training layer's EKS cluster, without the accelerated node pieces: HyperPod brings the nodes and the
    HyperPod chart their NVIDIA, Neuron and EFA device plugins, so `TrainingCluster` sees no node groups and
    installs none of its own (two device plugins on one node would both advertise the devices)."""
    return TrainingCluster(scope, "Training", **cluster_props(blueprint, network), removal_policy=removal_policy)


class HyperPodEksTrainingStack(TrainingEngineStack):
    """EKS cluster + HyperPod instance groups attached to it, EFA security group, FSx for Lustre."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            network=network,
            description=f"mlstack {blueprint.name}: EKS cluster with SageMaker HyperPod nodes, FSx for Lustre",
            **kwargs,
        )
        training = self.training
        hyperpod = training.hyperpod or HyperPodConfig()
        self.cluster = eks_cluster(self, blueprint, network, training, removal_policy=self.removal_policy)
        eks = self.cluster.cluster
        self.admin_host = admin_host(self, network, self.cluster, training)
        subnet = network.network.subnet_in(training.zone_of(training.node_groups[0], blueprint.zones))
        self.efa = EfaNetworking(self, "Efa", vpc=network.vpc, subnet=subnet, placement_group=False)
        # The EKS cluster security group lets nodes and control plane talk (and admits itself); the EFA group
        # admits itself, as every group on an EFA interface must.
        groups: list[ec2.ISecurityGroup] = [self.efa.security_group, eks.cluster_security_group]

        namespace = training.job.namespace
        namespace_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        if governance(training) is None:
            namespace_manifest = self.cluster.add_manifest("JobNamespace", namespace_doc)
        else:
            # HyperPod task governance creates the team's namespace with its compute allocation and deletes it with
            # it: the stack adopts it (kubectl apply, not create, after the allocation: `add_task_governance`) and
            # leaves its deletion to HyperPod.
            namespace_manifest = eks_v2.KubernetesManifest(
                eks,
                "manifest-JobNamespace",
                cluster=self.cluster.cluster_ref,
                manifest=[namespace_doc],
                overwrite=True,
                # Kept on delete and update, not when its own first create rolls back (nor does the allocation).
                removal_policy=RETAINED,
            )
        self.job_image = add_first_job(self, blueprint, self.cluster, namespace_manifest)
        self.fsx: FsxLustre | None = None
        if training.fsx is not None:
            self.fsx = FsxLustre(
                self,
                "Fsx",
                vpc=network.vpc,
                subnet=network.network.subnet_in(training.fsx_zone(blueprint.zones)),
                key=network.key,
                clients=ec2.Connections(security_groups=groups),
                **fsx_props(training.fsx),
                removal_policy=self.removal_policy,
            )
            self.cluster.add_file_system(
                *self.fsx.kubernetes_manifests(namespace=namespace, claim_name=FSX_CLAIM), namespace=namespace_manifest
            )

        self.hyperpod_chart = HyperPodDependencies(
            self,
            "HyperPodChart",
            cluster=eks,
            kubectl_layer=self.cluster.kubectl_layer,
            subnets=network.network.private_subnets,
            key=network.key,
            removal_policy=self.removal_policy,
            # The chart's own defaults, and the Region its agents report in.
            values={"global": {"region": self.region}},
        )
        # A hook or a webhook of a sub-chart needs a node to run on: install once the system nodes are up.
        self.hyperpod_chart.install.node.add_dependency(self.cluster.system_nodes)
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            cluster_name=blueprint.name,
            subnet=subnet,
            security_groups=groups,
            key=network.key,
            instance_groups=labelled_workers(training, hyperpod),
            lifecycle_scripts=hyperpod.scripts_dir_for(training.engine),
            on_create=hyperpod.on_create,
            node_recovery=hyperpod.node_recovery,
            removal_policy=self.removal_policy,
            eks_cluster_arn=eks.cluster_arn,
            # The EKS engine mounts FSx through the CSI driver (the FsxVolume manifest), not from lifecycle scripts.
            fsx_dns_name=None,
            fsx_mount_name=None,
            fsx_mount_path=FSX_MOUNT_PATH,
            workloads=None,
            volume_key=volume_encryption(hyperpod, training.engine, network.key)["volume_key"],
            # Continuous provisioning: for a customer-managed volume key, and always with autoscaling.
            node_provisioning_mode="Continuous" if continuous_provisioning(training) else None,
            autoscaling=autoscaling(training) is not None,
            # The nvidia-smi agent on the GPU nodes (on_create.sh): the add-on's DCGM exporter is off.
            host_agent=host_agent(blueprint, training),
        )
        # Like managed node groups: a node that joins before the CNI, kube-proxy and Pod Identity agent add-ons
        # exist cannot give its pods IPs.
        for addon in self.cluster.node_prerequisites:
            self.hyperpod.cluster.node.add_dependency(addon)
        # HyperPod checks for its chart's agents when it creates the cluster (SageMaker HyperPod docs: without the
        # chart "the creation process" may fail).
        self.hyperpod.cluster.node.add_dependency(self.hyperpod_chart.install)
        self.task_governance = add_task_governance(self, blueprint, self.cluster, self.hyperpod, namespace_manifest)
        self.hyperpod_pools = add_hyperpod_pools(self, blueprint, self.cluster, self.hyperpod, network.key)
        self.operations = add_operations(self, network, fsx=self.fsx, cluster=self.cluster, hyperpod=self.hyperpod)
        kernel_log = self.operations.observability.host_log_group
        if kernel_log is not None:
            # HyperPod boots the nodes, and their agents, during CreateCluster.
            self.hyperpod.cluster.node.add_dependency(kernel_log)


def labelled_workers(training: TrainingConfig, hyperpod: HyperPodConfig) -> list[HyperPodInstanceGroup]:
    """The worker groups with the node-group label the rendered job selects (`render_job` nodeSelector), set by
    HyperPod through the instance group's KubernetesConfig."""
    return [
        dataclasses.replace(group, labels={f"{LABEL_PREFIX}/node-group": group.name})
        for group in worker_groups(training, hyperpod)
    ]
