"""`MlVpc`: the private network every mlstack workload runs in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from aws_cdk import CfnResource, Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack.constructs.common import LOG_RETENTION_DAYS, pascal_id
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import skip_checkov, skip_guard
from mlstack.constructs.security.groups import closed_security_group

GatewayEndpoint = Literal["s3", "dynamodb"]


class MlVpc(Construct):
    """A VPC for ML hosts: private subnets (with NAT, or isolated), VPC endpoints and encrypted flow logs.

    - Hosts never get public IPs: workloads go in the private subnets; the public subnets (only created
      when there is a NAT gateway) have `MapPublicIpOnLaunch` off and hold nothing but the NAT gateways.
    - AZs are fixed by the caller (no lookups). When `zones_are_ids` is set, the subnets are pinned by
      AZ ID (`AvailabilityZoneId`), which names the same physical AZ in every account.
    - Flow logs go to a log group encrypted with `key` and kept per `removal_policy`.

    Props (keyword; defaults in parentheses): `zones` (required: AZ names, or AZ IDs with `zones_are_ids`), `key`
    (required), `zones_are_ids` (False), `cidr` (10.0.0.0/16), `nat_gateways` (1; 0 makes the private subnets
    isolated), `private_subnet_mask` (18), `interface_endpoints` (none: service name suffixes such as `ecr.api`),
    `gateway_endpoints` (`s3`), `flow_log_retention` (one year), `flow_log_traffic` (ALL), `removal_policy`
    (`RETAINED`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        zones: Sequence[str],
        key: kms.IKey,
        zones_are_ids: bool = False,
        cidr: str = "10.0.0.0/16",
        nat_gateways: int = 1,
        private_subnet_mask: int = 18,
        interface_endpoints: Sequence[str] = (),
        gateway_endpoints: Sequence[GatewayEndpoint] = ("s3",),
        flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        flow_log_traffic: ec2.FlowLogTrafficType = ec2.FlowLogTrafficType.ALL,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        self.zones = list(zones)
        self.isolated = nat_gateways == 0
        private_type = ec2.SubnetType.PRIVATE_ISOLATED if self.isolated else ec2.SubnetType.PRIVATE_WITH_EGRESS
        subnets = [ec2.SubnetConfiguration(name="Private", subnet_type=private_type, cidr_mask=private_subnet_mask)]
        if not self.isolated:
            subnets.insert(
                0,
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24, map_public_ip_on_launch=False
                ),
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=self.zones,
            nat_gateways=nat_gateways,
            subnet_configuration=subnets,
            create_internet_gateway=not self.isolated,
            restrict_default_security_group=True,
        )
        self.private_subnets: list[ec2.ISubnet] = list(self.vpc.select_subnets(subnet_type=private_type).subnets)
        if zones_are_ids:
            self._pin_subnets_by_az_id()

        for service in gateway_endpoints:
            gateway = (
                ec2.GatewayVpcEndpointAwsService.S3 if service == "s3" else ec2.GatewayVpcEndpointAwsService.DYNAMODB
            )
            self.vpc.add_gateway_endpoint(f"{service.capitalize()}Gateway", service=gateway)
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if interface_endpoints:
            # One group for all interface endpoints: HTTPS from the VPC's (literal) CIDR, nothing out.
            self.endpoint_security_group = closed_security_group(
                self,
                "EndpointSecurityGroup",
                vpc=self.vpc,
                description="Interface VPC endpoints: HTTPS from inside the VPC",
            )
            self.endpoint_security_group.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        for service_name in interface_endpoints:
            self.vpc.add_interface_endpoint(
                pascal_id(service_name) + "Endpoint",
                service=ec2.InterfaceVpcEndpointAwsService(service_name),
                private_dns_enabled=True,
                subnets=ec2.SubnetSelection(subnets=self.private_subnets),
                security_groups=[self.endpoint_security_group] if self.endpoint_security_group else None,
                open=False,
            )

        self._secure_default_sg_handler(key, removal_policy)

        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogGroup",
            retention=flow_log_retention,
            encryption_key=key,
            removal_policy=removal_policy,
        )
        self.flow_log = self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=flow_log_traffic,
        )

    def _secure_default_sg_handler(self, key: kms.IKey, removal_policy: RemovalPolicy) -> None:
        """CDK's function behind `restrict_default_security_group` (it strips the default group's rules): a log group
        of its own (encrypted, with retention; created before the function first runs, else Lambda creates an
        unencrypted one that never expires) and the checkov findings its generated code leaves open, skipped with
        the reason."""
        provider = Stack.of(self).node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        custom = self.vpc.node.try_find_child("RestrictDefaultSecurityGroupCustomResource")
        if provider is None or custom is None:
            return
        handler = provider.node.find_child("Handler")
        assert isinstance(handler, CfnResource)
        self.default_sg_log_group = logs.LogGroup(
            self,
            "RestrictDefaultSgLogGroup",
            log_group_name=Fn.join("", ["/aws/lambda/", handler.ref]),
            retention=logs.RetentionDays.ONE_YEAR,
            encryption_key=key,
            removal_policy=removal_policy,
        )
        custom.node.add_dependency(self.default_sg_log_group)
        skip_checkov(
            handler,
            {
                "CKV_AWS_115": "CDK's handler that strips the default security group's rules runs once per stack "
                "create/update/delete; reserved concurrency would only take capacity from the account pool",
                "CKV_AWS_116": "invoked synchronously by CloudFormation (custom resource), which fails the stack "
                "operation on an error; a DLQ only receives failed asynchronous events",
                "CKV_AWS_117": "calls only the EC2 API on the default security group and handles no data; outside the "
                "VPC it needs no NAT or endpoint, so it also works in an isolated network",
            },
        )
        skip_guard(
            handler,
            {
                "CT.LAMBDA.PR.3": "calls only the EC2 API on the default security group and handles no data; outside "
                "the VPC it needs no NAT or endpoint, so it also works in an isolated network",
            },
        )

    def _pin_subnets_by_az_id(self) -> None:
        for subnet in [*self.vpc.public_subnets, *self.vpc.private_subnets, *self.vpc.isolated_subnets]:
            cfn = subnet.node.default_child
            assert isinstance(cfn, ec2.CfnSubnet)
            cfn.add_property_deletion_override("AvailabilityZone")
            cfn.add_property_override("AvailabilityZoneId", subnet.availability_zone)

    def subnet_in(self, zone: str) -> ec2.ISubnet:
        """The private subnet in `zone` (an AZ name or ID, as the blueprint gives them)."""
        for subnet in self.private_subnets:
            if subnet.availability_zone == zone:
                return subnet
        raise ValueError(f"no private subnet in {zone!r}; the network spans {', '.join(self.zones)}")


def retention(days: int) -> logs.RetentionDays:
    """The RetentionDays member of a CloudWatch retention period (one of `LOG_RETENTION_DAYS`)."""
    # RetentionDays members, in order, are exactly the CloudWatch retention periods (INFINITE last).
    by_days = dict(zip(LOG_RETENTION_DAYS, [m for m in logs.RetentionDays if m.name != "INFINITE"], strict=True))
    return by_days[days]
