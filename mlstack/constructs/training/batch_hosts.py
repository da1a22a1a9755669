"""The container instances of `BatchMultiNodeTraining`: their role and instance profile, and the launch template
(every EFA interface, IMDSv2 with hop limit 1, the encrypted root volume, the user data of `batch_user_data`, the
reservation or Capacity Block), apart from the construct. `container_instances` creates them in the construct's
scope, under the IDs the construct has always given them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.training.batch_user_data import user_data
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.host_agent import acknowledge_host_agent, host_agent_statements
from mlstack.constructs.training.metric_names import HostAgent


@dataclass(frozen=True)
class Hosts:
    role: iam.Role
    profile: iam.CfnInstanceProfile
    launch_template: ec2.CfnLaunchTemplate


def container_instances(
    scope: Construct,
    *,
    efa: EfaNetworking,
    instance_type: str,
    security_group_ids: Sequence[str],
    key: kms.IKey,
    root_volume_gib: int,
    fsx_path: str,
    fsx_dns_name: str | None,
    fsx_mount_name: str | None,
    stop_timeout_s: int | None,
    host_agent: HostAgent | None,
    capacity_reservation_id: str | None,
    capacity_block: bool,
) -> Hosts:
    """Constructs `InstanceRole`, `InstanceProfile` and `LaunchTemplate` in `scope` (props as the construct's)."""
    role = iam.Role(
        scope,
        "InstanceRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[
            iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AmazonEC2ContainerServiceforEC2Role")
        ],
        description="Batch container instances: register with ECS, pull images, write job logs",
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonEC2ContainerServiceforEC2Role]",
            reason="the ECS agent on Batch container instances needs it (AWS Batch User Guide, instance role)",
        )
    )
    if host_agent is not None:
        for statement in host_agent_statements(host_agent):
            role.add_to_policy(statement)
        acknowledge_host_agent(role, host_agent)
    profile = iam.CfnInstanceProfile(scope, "InstanceProfile", roles=[role.role_name])

    interfaces = efa.network_interfaces(instance_type, extra_security_group_ids=list(security_group_ids))
    reservation = None
    market = None
    if capacity_reservation_id is not None:
        reservation = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
            capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                capacity_reservation_id=capacity_reservation_id
            )
        )
    if capacity_block:
        market = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
    template = ec2.CfnLaunchTemplate(
        scope,
        "LaunchTemplate",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            network_interfaces=interfaces,
            # Hop limit 1: only the host reads IMDS (user data, and the ECS agent, which runs in the host's
            # network namespace); containers get the job role from the ECS agent's credential endpoint, and
            # host_setup.sh sets ECS_AWSVPC_BLOCK_IMDS for the awsvpc containers, which a hop limit cannot stop.
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            block_device_mappings=[
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
            user_data=user_data(
                fsx_path=fsx_path,
                fsx_dns_name=fsx_dns_name,
                fsx_mount_name=fsx_mount_name,
                stop_timeout_s=stop_timeout_s,
                host_agent_config=host_agent.config if host_agent is not None else None,
            ),
            capacity_reservation_specification=reservation,
            instance_market_options=market,
        ),
    )
    skip_guard(
        template,
        {
            "CT.EC2.PR.10": "one-minute EC2 metrics cost per instance; training health comes from the job's own "
            "step lines and the GPU metrics, not from EC2's CPU metrics",
            "CT.EC2.PR.9": "the interfaces are in private subnets without an internet gateway route, and EC2 "
            "assigns no public IPv4 address to an instance launched with several network interfaces",
        },
    )
    return Hosts(role, profile, template)
