"""`closed_security_group`: the one way mlstack constructs make a security group."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


def closed_security_group(scope: Construct, construct_id: str, *, vpc: ec2.IVpc, description: str) -> ec2.SecurityGroup:
    """A security group that allows nothing until the caller names each path as a rule.

    Inbound is closed by EC2's default; outbound is closed too (`allow_all_outbound=False`), unlike the CDK's
    default of all traffic out, so every destination a resource reaches (HTTPS to endpoints, its own group for EFA or
    Lustre, ...) is a rule a reviewer can read in the template (cdk-nag EC23 / checkov CKV_AWS_23 reviews).
    """
    return ec2.SecurityGroup(scope, construct_id, vpc=vpc, description=description, allow_all_outbound=False)
