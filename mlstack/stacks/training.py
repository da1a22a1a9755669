"""`TrainingClusterStack`: an EKS training cluster with EFA-wired accelerated node groups and FSx for Lustre.

Its part of `mlstack plan` is `mlstack.stacks.training_plan` (no CDK import there).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.config.training import construct_id as _construct_id
from mlstack.constructs.scanners import skip_checkov
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training.admin_host import ClusterAdminHost
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.node_group import AcceleratedNodeGroup
from mlstack.k8s.job import FSX_CLAIM
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training_plan import ADMIN_HOST_TYPE, cluster_name, memory_warnings

STACK = "TrainingClusterStack"


class TrainingClusterStack(MlStack):
    """EKS cluster, node groups (one per blueprint entry, EFA from the catalog), FSx for Lustre, manifests."""

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
            description=f"mlstack {blueprint.name}: EKS training cluster, EFA node groups, FSx for Lustre",
            **kwargs,
        )
        if blueprint.training is None:
            raise ValueError(f"blueprint {blueprint.name!r} has no training section")
        training: TrainingConfig = blueprint.training
        self.training = training
        zones = blueprint.zones
        vpc = network.vpc
        key = network.key
        _allow_ebs_encryption_by_autoscaling(network)

        self.cluster = TrainingCluster(
            self,
            "Training",
            vpc=vpc,
            subnets=network.network.private_subnets,
            key=key,
            config=training,
            cluster_name=cluster_name(blueprint),
            removal_policy=self.removal_policy,
        )
        self.admin_host: ClusterAdminHost | None = None
        if training.cluster.admin_host:
            self.admin_host = ClusterAdminHost(
                self,
                "AdminHost",
                vpc=vpc,
                subnet=network.network.private_subnets[0],
                key=key,
                cluster=self.cluster.cluster,
                kubernetes_version=training.cluster.kubernetes_version,
                instance_type=ADMIN_HOST_TYPE,
            )
        self.efa: dict[str, EfaNetworking] = {}
        self.node_groups: dict[str, AcceleratedNodeGroup] = {}
        for group in training.node_groups:
            subnets = [network.network.subnet_in(z) for z in training.zones_of(group, zones)]
            efa = None
            if group.efa:
                efa = EfaNetworking(
                    self,
                    f"{_construct_id(group.name)}Efa",
                    vpc=vpc,
                    subnet=subnets[0],
                    placement_group=group.uses_placement_group,
                )
                self.efa[group.name] = efa
            self.node_groups[group.name] = AcceleratedNodeGroup(
                self,
                f"{_construct_id(group.name)}Nodes",
                cluster=self.cluster.cluster_ref,
                config=group,
                subnets=subnets,
                key=key,
                cluster_security_group_id=self.cluster.cluster_security_group_id,
                efa=efa,
            )
            # Like the system nodes: a node that starts before the CNI, kube-proxy and Pod Identity agent add-ons
            # exist cannot give its pods IPs.
            for addon in self.cluster.node_prerequisites:
                self.node_groups[group.name].nodegroup.node.add_dependency(addon)

        namespace = training.job.namespace
        self.cluster.add_manifest(
            "JobNamespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        self.fsx: FsxLustre | None = None
        if training.fsx is not None:
            fsx_zone = training.fsx_zone(zones)
            self.fsx = FsxLustre(
                self,
                "Fsx",
                vpc=vpc,
                subnet=network.network.subnet_in(fsx_zone),
                key=key,
                config=training.fsx,
                clients=self._fsx_clients(),
                removal_policy=self.removal_policy,
            )
            volume = self.cluster.add_manifest(
                "FsxVolume", *self.fsx.kubernetes_manifests(namespace=namespace, claim_name=FSX_CLAIM)
            )
            volume.node.add_dependency(self.cluster.addons["aws-fsx-csi-driver"])
            volume.node.add_dependency(self.cluster.cluster.node.find_child("manifest-JobNamespace"))

        for warning in memory_warnings(training):
            Annotations.of(self).add_warning_v2("mlstack:model-fit", warning)

    def _fsx_clients(self) -> ec2.Connections:
        """Every node that may mount the file system: the EFA group of each EFA node group (on every interface of
        those nodes) and, when some node group has no EFA, the EKS cluster security group (the only group on such
        nodes). The job can run on any node group (`training.job.node_group`), so one group is not enough."""
        groups: list[ec2.ISecurityGroup] = [efa.security_group for efa in self.efa.values()]
        if any(not group.efa for group in self.training.node_groups):
            groups.append(self.cluster.cluster.cluster_security_group)
        return ec2.Connections(security_groups=groups)


def _allow_ebs_encryption_by_autoscaling(network: NetworkStack) -> None:
    """Managed node groups launch through EC2 Auto Scaling; volumes encrypted with a customer-managed key need the
    key to allow EC2 (on behalf of the account's principals, including the Auto Scaling service-linked role).

    Conditioned like the AWS-managed `aws/ebs` key policy (caller account + via EC2), so no principal has to exist
    when the policy is written. Added to the project key in NetworkStack.
    """
    stack = Stack.of(network)
    conditions = {
        "StringEquals": {"kms:CallerAccount": stack.account, "kms:ViaService": f"ec2.{stack.region}.amazonaws.com"}
    }
    network.key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowEbsThroughEc2",
            principals=[iam.AnyPrincipal()],
            actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
            resources=["*"],
            conditions=conditions,
        )
    )
    skip_checkov(
        network.key,
        {
            "CKV_AWS_33": "the two statements with principal * (AllowEbsThroughEc2, AllowEbsGrantsThroughEc2) are "
            "bounded by kms:CallerAccount = this account and kms:ViaService = ec2.<region>, as in the AWS-managed "
            "aws/ebs key policy: EC2 Auto Scaling's service-linked role encrypts node volumes without being named",
        },
    )
    network.key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowEbsGrantsThroughEc2",
            principals=[iam.AnyPrincipal()],
            actions=["kms:CreateGrant"],
            resources=["*"],
            conditions={**conditions, "Bool": {"kms:GrantIsForAWSResource": "true"}},
        )
    )
