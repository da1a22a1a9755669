"""`EfaNetworking`: what every EFA fleet shares (EC2 User Guide, "Get started with EFA"): a self-referencing
security group, a cluster placement group (unless a reservation fixes placement) and one subnet in one AZ."""

from __future__ import annotations

from collections.abc import Sequence

import jsii
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from mlstack.catalog import efa_layout
from mlstack.constructs.security.groups import closed_security_group


@jsii.implements(ec2.IConnectable)
class EfaNetworking(Construct):
    """Security group and placement for EFA-enabled instances of one node group.

    - The security group allows all traffic to and from itself, in and out (EFA OS-bypass needs
      it; EC2 User Guide, EFA security group),
      and nothing else: other traffic (control plane, image pulls) goes through the other groups on the node.
    - `placement_group` is a cluster placement group, or None when a capacity reservation or Capacity Block
      already fixes placement (eksctl does the same).
    - EFA does not cross subnets or AZs, so the construct holds exactly one subnet.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        placement_group: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self.subnet = subnet
        self.availability_zone = subnet.availability_zone
        self.security_group = closed_security_group(
            self, "SecurityGroup", vpc=vpc, description="EFA peers: all traffic to and from this group only"
        )
        # allow_internally emits both the self-referencing ingress and the self-referencing egress rule.
        self.security_group.connections.allow_internally(ec2.Port.all_traffic(), "EFA: all traffic within the group")
        self.placement_group: ec2.PlacementGroup | None = None
        if placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections

    def network_interfaces(
        self,
        instance_type: str,
        *,
        efa_on_every_card: bool = False,
        extra_security_group_ids: Sequence[str] = (),
    ) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
        """Launch-template interfaces: every EFA the instance has, laid out by the catalog (`efa_layout`).

        Each interface carries this group plus `extra_security_group_ids` (e.g. the EKS cluster group, which
        also self-references all traffic). No subnet (the node group picks it), never a public IP: a training node
        has no reason to be reachable from the internet.
        """
        groups = [self.security_group.security_group_id, *extra_security_group_ids]
        return [
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                network_card_index=nic.network_card_index,
                device_index=nic.device_index,
                interface_type=nic.interface_type,
                groups=groups,
                delete_on_termination=True,
            )
            for nic in efa_layout(instance_type, efa_on_every_card=efa_on_every_card)
        ]
