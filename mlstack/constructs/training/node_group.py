"""`AcceleratedNodeGroup`: an EKS managed node group of one instance type, wired for EFA from the catalog."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aws_cdk import Acknowledgment, Fn, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.catalog import InstanceType, efa_layout, get_instance
from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.host_agent import acknowledge_host_agent, host_agent_shell, host_agent_statements
from mlstack.constructs.training.metric_names import HostAgent
from mlstack.k8s.kube import (
    EFA_TAINT,
    LABEL_PREFIX,
    UPDATE_STRATEGY,
    accelerator_taint_key,
    ami_type,
)

NITRO_FAMILIES_GUARD_MISSES = frozenset({"g6e"})
"""Nitro families missing from the instance-type list of the Control Tower rule CT.EC2.PR.15 that
@cdklabs/cdk-validator-cfnguard bundles (found by its test run; tests/template_checks)."""


_USER_DATA_BOUNDARY = "MLSTACK"


CapacityKind = Literal["on_demand", "spot", "capacity_reservation", "capacity_block"]


@dataclass(frozen=True)
class Capacity:
    """Where a node group's instances come from: On-Demand (the default), Spot, a targeted On-Demand Capacity
    Reservation (ODCR, optionally created in a cluster placement group) or an EC2 Capacity Block for ML."""

    kind: CapacityKind = "on_demand"
    reservation_id: str | None = None
    """`cr-...`: the ODCR or Capacity Block (both kinds, and only those)."""
    placement_group_name: str | None = None
    """ODCR only: the cluster placement group the reservation was created in (instances must launch there)."""

    def __post_init__(self) -> None:
        if self.is_reservation != (self.reservation_id is not None):
            raise ValueError(
                f"capacity {self.kind}: a reservation_id goes with capacity_reservation and capacity_block only"
            )
        if self.placement_group_name is not None and self.kind != "capacity_reservation":
            raise ValueError(f"capacity {self.kind}: placement_group_name is for capacity_reservation only")

    @property
    def is_reservation(self) -> bool:
        return self.kind in ("capacity_reservation", "capacity_block")

    @classmethod
    def spot(cls) -> Capacity:
        return cls("spot")

    @classmethod
    def reservation(cls, reservation_id: str, *, placement_group_name: str | None = None) -> Capacity:
        return cls("capacity_reservation", reservation_id, placement_group_name)

    @classmethod
    def capacity_block(cls, reservation_id: str) -> Capacity:
        return cls("capacity_block", reservation_id)


def node_labels(*, name: str, instance: InstanceType, capacity: Capacity, efa: bool) -> dict[str, str]:
    """Kubernetes labels with the instance facts jobs select on."""
    it = instance
    labels = {
        f"{LABEL_PREFIX}/node-group": name,
        f"{LABEL_PREFIX}/capacity": capacity.kind.replace("_", "-"),
        f"{LABEL_PREFIX}/efa-interfaces": str(sum(n.is_efa for n in efa_layout(it.name)) if efa else 0),
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


def taint_keys(instance: InstanceType, *, efa: bool) -> list[str]:
    """The NoSchedule taint keys of a node group: its accelerator's, and EFA's when it has EFA. Every per-node agent
    that must run on these nodes tolerates exactly these (the single source for taints and tolerations)."""
    return [k for k in (accelerator_taint_key(instance), EFA_TAINT if efa else None) if k]


def node_taints(instance: InstanceType, *, efa: bool) -> list[eks.TaintSpec]:
    """Accelerator nodes only take pods that tolerate their accelerator (and EFA) taints."""
    return [
        eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=key, value="true")
        for key in taint_keys(instance, efa=efa)
    ]


def node_user_data(*, local_nvme: bool, host_agent: HostAgent | None = None) -> str | None:
    """The launch template's MIME multi-part user data (None when it has no part).

    - `local_nvme`: an AL2023 nodeadm NodeConfig part that stripes the instance-store NVMe disks into one RAID0
      volume and puts containerd and kubelet state on it.
    - `host_agent`: a shell part that installs the CloudWatch agent (per-GPU nvidia-smi metrics, the kernel log's
      Xid lines; `host_agent_shell`).

    A managed node group on an EKS AMI type merges these parts with its own NodeConfig (EKS User Guide,
    "Customize managed nodes with launch templates", Amazon EC2 user data: "Amazon EKS merges your user data
    with its own"; https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html); on AL2023 nodeadm
    reads the `application/node.eks.aws` parts and cloud-init runs the `text/x-shellscript` parts
    (https://awslabs.github.io/amazon-eks-ami/nodeadm/)."""
    if not local_nvme and host_agent is None:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{_USER_DATA_BOUNDARY}"', ""]
    if local_nvme:
        lines += [
            f"--{_USER_DATA_BOUNDARY}",
            "Content-Type: application/node.eks.aws",
            "",
            "---",
            "apiVersion: node.eks.aws/v1alpha1",
            "kind: NodeConfig",
            "spec:",
            "  instance:",
            "    localStorage:",
            "      strategy: RAID0",
            "",
        ]
    if host_agent is not None:
        shell = host_agent_shell(host_agent)
        if f"--{_USER_DATA_BOUNDARY}" in shell:
            raise ValueError(f"the host agent's script must not hold the MIME boundary --{_USER_DATA_BOUNDARY}")
        lines += [f"--{_USER_DATA_BOUNDARY}", 'Content-Type: text/x-shellscript; charset="us-ascii"', "", shell]
    return "\n".join([*lines, f"--{_USER_DATA_BOUNDARY}--", ""])


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
      On-Demand / Spot / reserved capacity type, sizes (desired 0 by default).

    Props (keyword; defaults in parentheses): `cluster`, `name` (the `mlstack.io/node-group` label), `instance_type`
    (a catalog type), `subnets`, `key`, `cluster_security_group` (required); `efa` (None: no EFA; an
    `EfaNetworking` puts every EFA of the instance on the nodes, and then `subnets` must be exactly one),
    `efa_on_every_card` (False: `efa-only` interfaces on cards 1..N-1, per the catalog), `capacity` (On-Demand),
    `desired_size` (0: no instance runs until asked for), `min_size` (0), `max_size` (2), `root_volume_gib` (200),
    `host_agent` (None: no agent; on an NVIDIA GPU instance, the CloudWatch agent's user-data part and its
    statements in the node role's policy; the kernel-log group must exist before the nodes boot).
    `TrainingCluster.add_accelerated_node_group` builds one and keeps the cluster's device plugins in step.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        name: str,
        instance_type: str,
        subnets: Sequence[ec2.ISubnet],
        key: kms.IKey,
        cluster_security_group: ec2.ISecurityGroup,
        efa: EfaNetworking | None = None,
        efa_on_every_card: bool = False,
        capacity: Capacity | None = None,
        desired_size: int = 0,
        min_size: int = 0,
        max_size: int = 2,
        root_volume_gib: int = 200,
        host_agent: HostAgent | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        it = get_instance(instance_type)
        capacity = capacity or Capacity()
        self.name = name
        self.instance = it
        self.capacity = capacity
        self.efa = efa
        if efa is not None and not it.efa_supported:
            raise ValueError(f"node group {name!r}: {it.name} does not support EFA; pass no EfaNetworking")
        if efa is not None and len(subnets) != 1:
            raise ValueError(f"node group {name!r}: an EFA group takes exactly one subnet, got {len(subnets)}")
        if efa_on_every_card and efa is None:
            raise ValueError(f"node group {name!r}: efa_on_every_card needs an EfaNetworking")
        if not min_size <= desired_size <= max_size:
            raise ValueError(
                f"node group {name!r}: sizes must satisfy min_size <= desired_size <= max_size, got "
                f"{min_size} <= {desired_size} <= {max_size}"
            )
        cluster_security_group_id = cluster_security_group.security_group_id

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
                        volume_size=root_volume_gib,
                        volume_type="gp3",
                        encrypted=True,
                        kms_key_id=key.key_arn,
                        delete_on_termination=True,
                    ),
                )
            ],
            "monitoring": ec2.CfnLaunchTemplate.MonitoringProperty(enabled=True),
        }
        if efa is not None:
            data["network_interfaces"] = efa.network_interfaces(
                it.name,
                efa_on_every_card=efa_on_every_card,
                extra_security_group_ids=[cluster_security_group_id],
            )
            if efa.placement_group is not None:
                data["placement"] = ec2.CfnLaunchTemplate.PlacementProperty(
                    group_name=efa.placement_group.placement_group_name
                )
            elif capacity.placement_group_name is not None:
                # The cluster placement group the ODCR was created in: instances launched there match it.
                data["placement"] = ec2.CfnLaunchTemplate.PlacementProperty(group_name=capacity.placement_group_name)
        else:
            data["security_group_ids"] = [cluster_security_group_id]
        # The agent only where nvidia-smi is (a Neuron group's user data stays as it was).
        self.host_agent = host_agent if it.accelerator is not None and it.accelerator.vendor == "nvidia" else None
        user_data = node_user_data(local_nvme=it.has_local_nvme, host_agent=self.host_agent)
        if user_data is not None:
            data["user_data"] = Fn.base64(user_data)
        if capacity.is_reservation:
            data["capacity_reservation_specification"] = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=capacity.reservation_id
                )
            )
        if capacity.kind == "capacity_block":
            data["instance_market_options"] = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(
                market_type="capacity-block"
            )
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(**data),
        )
        guard_skips = {
            "CT.EC2.PR.2": "hop limit 2 (the EKS default): the FSx CSI node plugin and the CloudWatch agent read "
            "instance metadata from their own network namespace (see MetadataOptions above)",
            "CT.EC2.PR.9": "nodes launch only into MlVpc's private subnets, which never map public IPv4 addresses "
            "(MapPublicIpOnLaunch false), so no interface gets one",
        }
        if it.name.split(".")[0] in NITRO_FAMILIES_GUARD_MISSES:
            guard_skips["CT.EC2.PR.15"] = f'{it.name} is built on the AWS Nitro System (EC2 User Guide, "Instances '
            "built on the AWS Nitro System\"); the rule's list of Nitro types predates the family"
        skip_guard(self.launch_template, guard_skips)

        capacity_type = {
            "on_demand": eks.CapacityType.ON_DEMAND,
            "spot": eks.CapacityType.SPOT,
            "capacity_reservation": eks.CapacityType.ON_DEMAND,
            "capacity_block": eks.CapacityType.CAPACITY_BLOCK,
        }[capacity.kind]
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            # The instance type lives in the launch template (needed for Capacity Blocks; also keeps CDK's
            # GPU-family check, which does not know p5/p6/trn, out of the way).
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            capacity_type=capacity_type,
            desired_size=desired_size,
            min_size=min_size,
            max_size=max_size,
            labels=node_labels(name=name, instance=it, capacity=capacity, efa=efa is not None),
            taints=node_taints(it, efa=efa is not None),
            # Replace or reboot nodes whose GPUs/Neuron devices or runtime go unhealthy (node monitoring agent
            # conditions; EKS User Guide, "Enable node auto repair").
            enable_node_auto_repair=True,
            # An update drains each node through the Kubernetes eviction API and stops when a PodDisruptionBudget
            # forbids it, instead of deleting the pods after the drain times out (CDK's default, forceUpdate true;
            # EKS User Guide, "Update a managed node group": force update "ignores PDBs"). The training stack
            # puts a budget on job pods, so an update fails and rolls back while a job runs, rather than kill it.
            force_update=False,
        )
        acknowledge_node_role(self.nodegroup)
        if self.host_agent is not None:
            for statement in host_agent_statements(self.host_agent):
                self.nodegroup.role.add_to_principal_policy(statement)
            acknowledge_host_agent(self.nodegroup.role, self.host_agent)
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
