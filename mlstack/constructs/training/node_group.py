"""`AcceleratedNodeGroup`: an EKS managed node group of one instance type, wired for EFA from the catalog."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Fn, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.catalog import efa_layout
from mlstack.config.training import NodeGroupConfig
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.k8s.kube import (
    EFA_TAINT,
    LABEL_PREFIX,
    UPDATE_STRATEGY,
    accelerator_taint_key,
    ami_type,
)

_USER_DATA_BOUNDARY = "MLSTACK"


def node_labels(config: NodeGroupConfig) -> dict[str, str]:
    """Kubernetes labels with the instance facts jobs select on."""
    it = config.instance
    labels = {
        f"{LABEL_PREFIX}/node-group": config.name,
        f"{LABEL_PREFIX}/capacity": config.capacity.type.replace("_", "-"),
        f"{LABEL_PREFIX}/efa-interfaces": str(sum(n.is_efa for n in efa_layout(it.name)) if config.efa else 0),
        f"{LABEL_PREFIX}/network-gbps": f"{it.network_gbps:g}",
    }
    if it.accelerator is not None:
        labels[f"{LABEL_PREFIX}/accelerator-kind"] = it.accelerator.kind
        labels[f"{LABEL_PREFIX}/accelerator"] = it.accelerator.model
        labels[f"{LABEL_PREFIX}/accelerator-count"] = str(it.accelerator.count)
        labels[f"{LABEL_PREFIX}/accelerator-memory-gib"] = f"{it.accelerator.memory_gib:g}"
    if it.gpudirect_rdma is not None:
        labels[f"{LABEL_PREFIX}/gpudirect-rdma"] = str(it.gpudirect_rdma).lower()
    return labels


def taint_keys(config: NodeGroupConfig) -> list[str]:
    """The NoSchedule taint keys of a node group: its accelerator's, and EFA's when it has EFA. Every per-node agent
    that must run on these nodes tolerates exactly these (the single source for taints and tolerations)."""
    return [k for k in (accelerator_taint_key(config.instance), EFA_TAINT if config.efa else None) if k]


def node_taints(config: NodeGroupConfig) -> list[eks.TaintSpec]:
    """Accelerator nodes only take pods that tolerate their accelerator (and EFA) taints."""
    return [eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=key, value="true") for key in taint_keys(config)]


def local_nvme_user_data() -> str:
    """AL2023 nodeadm NodeConfig (MIME part) that stripes the instance-store NVMe disks into one RAID0 volume and
    puts containerd and kubelet state on it. EKS merges it with the node group's own NodeConfig."""
    node_config = "\n".join(
        [
            "---",
            "apiVersion: node.eks.aws/v1alpha1",
            "kind: NodeConfig",
            "spec:",
            "  instance:",
            "    localStorage:",
            "      strategy: RAID0",
        ]
    )
    return "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{_USER_DATA_BOUNDARY}"',
            "",
            f"--{_USER_DATA_BOUNDARY}",
            "Content-Type: application/node.eks.aws",
            "",
            node_config,
            "",
            f"--{_USER_DATA_BOUNDARY}--",
            "",
        ]
    )


NODE_ROLE_POLICIES = {
    "AmazonEKSWorkerNodePolicy": "kubelet registration and node describe calls (EKS managed node group node role)",
    "AmazonEC2ContainerRegistryReadOnly": "nodes pull add-on and workload images from ECR (read-only)",
}
"""The node role's only policies. AmazonEKS_CNI_Policy, which CDK adds by default, is removed: the VPC CNI has its
own Pod Identity role (`TrainingCluster`), so a pod that reads the node role from instance metadata gets no ENI or
IP permissions."""


def acknowledge_node_role(nodegroup: eks.Nodegroup) -> None:
    """Keep the node role to `NODE_ROLE_POLICIES` (EKS User Guide, node IAM role) and acknowledge them in cdk-nag."""
    role = nodegroup.role.node.default_child
    assert isinstance(role, iam.CfnRole)
    # Replaces the L2 role's lazy list (CDK adds AmazonEKS_CNI_Policy to a node group's generated role).
    role.managed_policy_arns = [
        iam.ManagedPolicy.from_aws_managed_policy_name(policy).managed_policy_arn for policy in NODE_ROLE_POLICIES
    ]
    for policy, reason in NODE_ROLE_POLICIES.items():
        rule = f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"
        Validations.of(nodegroup.role).acknowledge(Acknowledgment(id=rule, reason=reason))


class AcceleratedNodeGroup(Construct):
    """A managed node group whose launch template carries every EFA of the instance (catalog layout).

    - Launch template: instance type, one network interface per EFA (each with the EFA group and the cluster
      group, deleted with the instance, no public IP), IMDSv2 required, encrypted gp3 root volume with `key`,
      local NVMe as a RAID0 for containers where the instance has it, the placement group unless a reservation
      fixes placement, and the capacity reservation / Capacity Block market options.
    - Node group: one subnet for EFA groups, AL2023 accelerated AMI type, taints and labels with instance facts,
      On-Demand / Spot / reserved capacity type, the blueprint's sizes (desired 0 by default).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        config: NodeGroupConfig,
        subnets: list[ec2.ISubnet],
        key: kms.IKey,
        cluster_security_group_id: str,
        efa: EfaNetworking | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        it = config.instance
        self.config = config
        self.instance = it
        self.efa = efa
        if config.efa and efa is None:
            raise ValueError(f"node group {config.name!r} asks for EFA: pass an EfaNetworking")
        if config.efa and len(subnets) != 1:
            raise ValueError(f"node group {config.name!r}: an EFA group takes exactly one subnet, got {len(subnets)}")

        data: dict[str, Any] = {
            "instance_type": it.name,
            "metadata_options": ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required",
                http_endpoint="enabled",
                # 2 hops (the EKS default), because two node agents run off the host network and read instance
                # metadata through their own network namespace: the FSx CSI node plugin (fsx-csi-node, no
                # hostNetwork in the driver's chart; instance ID and AZ) and the CloudWatch agent of
                # amazon-cloudwatch-observability (instance ID and type for Container Insights). The agents on the
                # host network (kubelet, aws-node, kube-proxy, Pod Identity agent, node monitoring agent) need 1.
                # What a pod can read is the node role, kept to NODE_ROLE_POLICIES: the CNI has its own role.
                http_put_response_hop_limit=2,
            ),
            "block_device_mappings": [
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name="/dev/xvda",
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=config.root_volume_gib,
                        volume_type="gp3",
                        encrypted=True,
                        kms_key_id=key.key_arn,
                        delete_on_termination=True,
                    ),
                )
            ],
            "monitoring": ec2.CfnLaunchTemplate.MonitoringProperty(enabled=True),
        }
        if efa is not None and config.efa:
            data["network_interfaces"] = efa.network_interfaces(
                it.name,
                efa_on_every_card=config.efa_on_every_card,
                extra_security_group_ids=[cluster_security_group_id],
            )
            if efa.placement_group is not None:
                data["placement"] = ec2.CfnLaunchTemplate.PlacementProperty(
                    group_name=efa.placement_group.placement_group_name
                )
            elif config.capacity.placement_group_name is not None:
                # The cluster placement group the ODCR was created in: instances launched there match it.
                data["placement"] = ec2.CfnLaunchTemplate.PlacementProperty(
                    group_name=config.capacity.placement_group_name
                )
        else:
            data["security_group_ids"] = [cluster_security_group_id]
        if it.has_local_nvme:
            data["user_data"] = Fn.base64(local_nvme_user_data())
        if config.capacity.is_reservation:
            data["capacity_reservation_specification"] = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=config.capacity.reservation_id
                )
            )
        if config.capacity.type == "capacity_block":
            data["instance_market_options"] = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(
                market_type="capacity-block"
            )
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(**data),
        )

        capacity_type = {
            "on_demand": eks.CapacityType.ON_DEMAND,
            "spot": eks.CapacityType.SPOT,
            "capacity_reservation": eks.CapacityType.ON_DEMAND,
            "capacity_block": eks.CapacityType.CAPACITY_BLOCK,
        }[config.capacity.type]
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            # The instance type lives in the launch template (needed for Capacity Blocks; also keeps CDK's
            # GPU-family check, which does not know p5/p6/trn, out of the way).
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
            subnets=ec2.SubnetSelection(subnets=subnets),
            capacity_type=capacity_type,
            desired_size=config.desired_size,
            min_size=config.min_size,
            max_size=config.max_size,
            labels=node_labels(config),
            taints=node_taints(config),
            # Replace or reboot nodes whose GPUs/Neuron devices or runtime go unhealthy (node monitoring agent
            # conditions; EKS User Guide, "Enable node auto repair").
            enable_node_auto_repair=True,
        )
        acknowledge_node_role(self.nodegroup)
        cfn = self.nodegroup.node.default_child
        assert isinstance(cfn, eks.CfnNodegroup)
        cfn.add_property_override("AmiType", ami_type(it))
        # MINIMAL: an update (AMI release, launch-template version) terminates a node before it launches the
        # replacement, one node at a time, so it needs no spare capacity, which an ODCR or Capacity Block does not
        # have. The default strategy launches first and fails or waits there (EKS User Guide, "Update a managed node
        # group", update strategies). A running job on the replaced node is interrupted either way: roll updates
        # between jobs (README, Training: updates).
        cfn.add_property_override("UpdateConfig", {"MaxUnavailable": 1, "UpdateStrategy": UPDATE_STRATEGY})
        self.ami_type = ami_type(it)
