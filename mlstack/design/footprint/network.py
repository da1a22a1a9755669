"""`NetworkStack`'s resources: the project key and `MlVpc`."""

from __future__ import annotations

from collections import Counter

from mlstack.config import BlueprintConfig
from mlstack.design.footprint.parts import LOG_GROUP, SECURITY_GROUP, Footprint, function, role
from mlstack.design.network import network_design


def project_key() -> Footprint:
    """`ProjectKey`: the key and its alias."""
    return Counter({"AWS::KMS::Key": 1, "AWS::KMS::Alias": 1})


def ml_vpc(*, zones: int, nat_gateways: int, interface_endpoints: int, gateway_endpoints: int) -> Footprint:
    """`MlVpc`: a private subnet per zone (and a public one per zone for NAT), the endpoints, the flow log."""
    public = zones if nat_gateways else 0
    subnets = zones + public
    found = Counter(
        {
            "AWS::EC2::VPC": 1,
            "AWS::EC2::Subnet": subnets,
            "AWS::EC2::RouteTable": subnets,
            "AWS::EC2::SubnetRouteTableAssociation": subnets,
            "AWS::EC2::VPCEndpoint": interface_endpoints + gateway_endpoints,
            "AWS::EC2::FlowLog": 1,
            # The flow-log group, and the one MlVpc gives the default-security-group custom resource's handler.
            LOG_GROUP: 2,
            "Custom::VpcRestrictDefaultSG": 1,
        }
    )
    if nat_gateways:
        found += Counter(
            {
                "AWS::EC2::InternetGateway": 1,
                "AWS::EC2::VPCGatewayAttachment": 1,
                "AWS::EC2::NatGateway": nat_gateways,
                "AWS::EC2::EIP": nat_gateways,
                "AWS::EC2::Route": subnets,  # public subnets to the internet gateway, private ones to a NAT
            }
        )
    if interface_endpoints:
        found[SECURITY_GROUP] += 1  # the endpoints' group, HTTPS from the VPC
    found += role()  # the flow log's role and its policy
    # The CDK's VpcRestrictDefaultSG provider: a role (inline policy) and a handler (log group counted above).
    found += function(policy=False) - Counter({LOG_GROUP: 1})
    return found


def network_stack(config: BlueprintConfig) -> Footprint:
    design = network_design(config)
    return project_key() + ml_vpc(
        zones=len(design.zones),
        nat_gateways=design.nat_gateways,
        interface_endpoints=len(design.interface_services),
        gateway_endpoints=len(design.gateway_endpoints),
    )
