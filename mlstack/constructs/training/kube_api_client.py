"""How a Lambda function in the cluster's VPC reaches the EKS API server's private endpoint: its own security group
(no inbound, HTTPS out) and one ingress rule on 443 into CDK's control-plane security group. Shared by the
functions that call the Kubernetes API (`HyperPodDependencies`, `ScaleToZero` with Karpenter pools)."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from mlstack.constructs.security.groups import closed_security_group


def api_client_group(
    scope: Construct,
    *,
    cluster: eks.Cluster,
    description: str,
    egress_description: str,
    ingress_description: str,
) -> tuple[ec2.SecurityGroup, list[ec2.CfnSecurityGroupIngress]]:
    """The group `SecurityGroup` in `scope` (HTTPS out to anywhere: the API endpoint, and AWS APIs or other hosts
    through the NAT gateway or interface endpoints) and the rule `ApiIngress1` that admits it on 443.

    The API endpoint's network interfaces carry both the EKS-created cluster security group and the groups the
    cluster was created with, here CDK's control-plane group (EKS User Guide, "View Amazon EKS security group
    requirements for clusters"; EKS API Reference, VpcConfigRequest securityGroupIds: "the security groups
    associated with the cross-account elastic network interfaces"). One rule into the control-plane group is
    enough; the cluster group is also on every node, so a rule there would open 443 on the nodes too. (The rule
    keeps its logical ID `ApiIngress1`, the one it had when a second rule into the cluster group came first.)
    The rule is a resource of its own (not `connections.allow_from`) so that what calls the API at deploy time can
    depend on it: a rule created after the function runs would leave it timing out against the endpoint."""
    group = closed_security_group(scope, "SecurityGroup", vpc=cluster.vpc, description=description)
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), egress_description)
    eks_created = cluster.cluster_security_group_id
    control_plane = [g for g in cluster.connections.security_groups if g.security_group_id != eks_created]
    if len(control_plane) != 1:
        raise ValueError(
            f"expected one control-plane security group beside the cluster group, got {len(control_plane)}"
        )
    ingress = [
        ec2.CfnSecurityGroupIngress(
            scope,
            "ApiIngress1",
            group_id=control_plane[0].security_group_id,
            source_security_group_id=group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description=ingress_description,
        )
    ]
    return group, ingress
