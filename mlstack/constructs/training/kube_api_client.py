"""How a Lambda function in the cluster's VPC reaches the EKS API server's private endpoint: its own security group
(no inbound, HTTPS out) and one ingress rule on 443 into each group on the endpoint's network interfaces. Shared by
the functions that call the Kubernetes API (`HyperPodDependencies`, `ScaleToZero` with Karpenter pools)."""

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
    through the NAT gateway or interface endpoints) and the rules `ApiIngress<i>` that admit it on 443.

    The API endpoint's ENIs carry CDK's control-plane group and the EKS cluster group: both admit the function. The
    rules are resources of their own (not `connections.allow_from`) so that what calls the API at deploy time can
    depend on them: a rule created after the function runs would leave it timing out against the endpoint."""
    group = closed_security_group(scope, "SecurityGroup", vpc=cluster.vpc, description=description)
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), egress_description)
    ingress = [
        ec2.CfnSecurityGroupIngress(
            scope,
            f"ApiIngress{i}",
            group_id=group_id,
            source_security_group_id=group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description=ingress_description,
        )
        for i, group_id in enumerate(g.security_group_id for g in cluster.connections.security_groups)
    ]
    return group, ingress
