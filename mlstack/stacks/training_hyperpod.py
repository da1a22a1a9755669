"""`TrainingClusterStack` for `training.engine: hyperpod-slurm`: a SageMaker HyperPod cluster with Slurm, the
worker groups from `training.node_groups`, FSx for Lustre mounted by the lifecycle scripts, and the first job
(`runtime/workloads`, uploaded with the scripts and staged on FSx by the controller). The nodes' extra EBS volumes
use HyperPod's AWS owned key: a customer-managed one needs continuous node provisioning, which HyperPod offers
only with EKS (`training.hyperpod.volume_key`).

Its part of `mlstack plan` is `mlstack.plan.training_engines`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig, TrainingConfig
from mlstack.config.training_engines import WORKLOADS_DIR, HyperPodConfig
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.hyperpod import DEEP_HEALTH_CHECKS, HyperPodCluster, HyperPodInstanceGroup
from mlstack.design.host_metrics import host_agent
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training import fsx_props
from mlstack.stacks.training_base import TrainingEngineStack
from mlstack.stacks.training_ops import add_operations

FSX_MOUNT_PATH = "/fsx"


def node_security_group(scope: Construct, vpc: ec2.IVpc) -> ec2.SecurityGroup:
    """The second group on every node of a non-EKS engine: outbound to the internet through NAT (S3, ECR, service
    APIs, package mirrors) and all traffic from itself. Every group on an EFA interface must admit itself, or EFA
    health checks fail (HyperPod: "EFA health checks did not run successfully")."""
    group = ec2.SecurityGroup(
        scope, "NodeSecurityGroup", vpc=vpc, description="Training nodes: egress via NAT, all traffic from itself"
    )
    group.add_ingress_rule(group, ec2.Port.all_traffic(), "nodes of this cluster")
    return group


def volume_encryption(hyperpod: HyperPodConfig, engine: str, key: kms.IKey) -> dict[str, Any]:
    """`HyperPodCluster` keywords of `training.hyperpod.volume_key`: the project key and continuous node provisioning
    (the only mode in which HyperPod takes a customer-managed volume key), or nothing (HyperPod's AWS owned key)."""
    if not hyperpod.customer_volume_key(engine):
        return {"volume_key": None, "node_provisioning_mode": None}
    return {"volume_key": key, "node_provisioning_mode": "Continuous"}


def worker_groups(training: TrainingConfig, hyperpod: HyperPodConfig) -> list[HyperPodInstanceGroup]:
    """`training.node_groups` as HyperPod compute groups (InstanceCount = desired_size)."""
    return [_worker(group, hyperpod) for group in training.node_groups]


def _worker(group: NodeGroupConfig, hyperpod: HyperPodConfig) -> HyperPodInstanceGroup:
    it = group.instance
    checks: tuple[str, ...] = ()
    if hyperpod.deep_health_checks and it.accelerator is not None:
        checks = DEEP_HEALTH_CHECKS if group.efa else DEEP_HEALTH_CHECKS[:1]
    return HyperPodInstanceGroup(
        name=group.name,
        instance_type=f"ml.{it.name}",
        count=group.desired_size,
        role="compute",
        threads_per_core=hyperpod.threads_per_core,
        volume_gib=hyperpod.worker_volume_gib,
        deep_health_checks=checks,
        training_plan_arn=hyperpod.training_plan_arn,
        efa=group.efa,
    )


class HyperPodTrainingStack(TrainingEngineStack):
    """HyperPod (Slurm) cluster, its lifecycle scripts in S3, EFA and node security groups, FSx for Lustre."""

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
            description=f"mlstack {blueprint.name}: SageMaker HyperPod (Slurm) cluster, FSx for Lustre",
            **kwargs,
        )
        training = self.training
        hyperpod = training.hyperpod or HyperPodConfig()
        zone = training.zone_of(training.node_groups[0], blueprint.zones)
        subnet = network.network.subnet_in(zone)
        self.efa = EfaNetworking(self, "Efa", vpc=network.vpc, subnet=subnet, placement_group=False)
        self.node_security_group = node_security_group(self, network.vpc)
        groups = [self.efa.security_group, self.node_security_group]

        self.fsx: FsxLustre | None = None
        if training.fsx is not None:
            self.fsx = FsxLustre(
                self,
                "Fsx",
                vpc=network.vpc,
                subnet=network.network.subnet_in(training.fsx_zone(blueprint.zones)),
                key=network.key,
                **fsx_props(training.fsx),
                clients=ec2.Connections(security_groups=groups),
                removal_policy=self.removal_policy,
            )
        instance_groups = [
            HyperPodInstanceGroup(
                name="controller",
                instance_type=f"ml.{hyperpod.controller.instance_type}",
                count=hyperpod.controller.count,
                role="controller",
                volume_gib=hyperpod.controller.volume_gib,
            )
        ]
        if hyperpod.login is not None:
            instance_groups.append(
                HyperPodInstanceGroup(
                    name="login",
                    instance_type=f"ml.{hyperpod.login.instance_type}",
                    count=hyperpod.login.count,
                    role="login",
                    volume_gib=hyperpod.login.volume_gib,
                )
            )
        instance_groups += worker_groups(training, hyperpod)
        self.cluster = HyperPodCluster(
            self,
            "HyperPod",
            cluster_name=blueprint.name,
            subnet=subnet,
            security_groups=groups,
            key=network.key,
            instance_groups=instance_groups,
            lifecycle_scripts=hyperpod.scripts_dir,
            on_create=hyperpod.on_create,
            fsx_dns_name=self.fsx.dns_name if self.fsx else None,
            fsx_mount_name=self.fsx.mount_name if self.fsx else None,
            fsx_mount_path=FSX_MOUNT_PATH,
            node_recovery=hyperpod.node_recovery,
            removal_policy=self.removal_policy,
            workloads=WORKLOADS_DIR,
            eks_cluster_arn=None,
            **volume_encryption(hyperpod, training.engine, network.key),
            host_agent=host_agent(blueprint, training),
            autoscaling=False,
        )
        self.operations = add_operations(self, network, fsx=self.fsx, hyperpod=self.cluster)
        kernel_log = self.operations.observability.host_log_group
        if kernel_log is not None:
            # HyperPod boots the nodes, and their agents, during CreateCluster.
            self.cluster.cluster.node.add_dependency(kernel_log)
