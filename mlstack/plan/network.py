"""The network part of `mlstack plan`: VPC, subnets, NAT gateways, endpoints, flow logs, the project key."""

from __future__ import annotations

from mlstack.catalog.quotes import infra_quote
from mlstack.config import BlueprintConfig
from mlstack.design.network import network_design
from mlstack.plan.model import Cost, Plan, Quota, Resource


def plan_network(config: BlueprintConfig, plan: Plan) -> None:
    net = network_design(config)
    zones = net.zones
    stack = "NetworkStack"
    plan.resources.append(Resource(stack, "VPC", f"{net.cidr} across {', '.join(zones)}"))
    kind = "isolated (no NAT)" if net.nat_gateways == 0 else "private with NAT egress"
    plan.resources.append(Resource(stack, "Private subnet", f"/{net.private_subnet_mask}, {kind}", len(zones)))
    if net.public_subnets:
        plan.resources.append(
            Resource(stack, "Public subnet", "for the NAT gateways (no host runs in it)", net.public_subnets)
        )
    if net.nat_gateways:
        plan.resources.append(Resource(stack, "NAT gateway", "with an Elastic IP", net.nat_gateways))
        nat = infra_quote("vpc.nat_gateway.hour", config.env.region)
        plan.costs.append(Cost("NAT gateway", net.nat_gateways, *nat))
        plan.quotas.append(Quota("ec2", "EC2-VPC Elastic IPs", "L-0263D0A3", net.nat_gateways))
    if net.interface_endpoints:
        plan.resources.append(
            Resource(stack, "Interface endpoint", ", ".join(net.interface_endpoints), len(net.interface_endpoints))
        )
        plan.costs.append(
            Cost(
                f"Interface endpoints ({len(net.interface_endpoints)} x {len(zones)} AZs)",
                len(net.interface_endpoints) * len(zones),
                *infra_quote("vpc.interface_endpoint.az_hour", config.env.region),
            )
        )
    for gateway in net.gateway_endpoints:
        plan.resources.append(Resource(stack, "Gateway endpoint", gateway))
    plan.resources.append(Resource(stack, "KMS key", "customer-managed, rotation on; shared by every stack"))
    plan.resources.append(
        Resource(stack, "Flow logs", f"CloudWatch Logs, {net.flow_log_retention_days} days, KMS-encrypted")
    )
    plan.quotas.append(Quota("vpc", "VPCs per Region", "L-F678F1CE", 1))
    if config.removal == "destroy":
        plan.warnings.append("removal: destroy — keys, logs, buckets and file systems are deleted with their stacks")


def cluster_egress_rows(config: BlueprintConfig) -> list[str]:
    """What an EKS cluster's private subnets reach only through NAT, when there is a single NAT gateway."""
    if config.network.nat_gateways != 1:
        return []
    return [
        "egress: the one NAT gateway (in one AZ) is the only path to the internet: the deploy's chart and archive "
        "downloads (ghcr.io, github.com, github.io, public.ecr.aws, quay.io), the admin host's kubectl (dl.k8s.io) "
        "and `aws eks update-kubeconfig` (no eks endpoint); if its AZ fails they stop until it is back "
        "(network.nat_gateways: 2 for one per AZ)"
    ]
