"""`NetworkStack`: the VPC and the project KMS key that later stacks share."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.constructs.network.ml_vpc import MlVpc, retention
from mlstack.constructs.security.project_key import ProjectKey
from mlstack.design.network import network_design
from mlstack.stacks.base import MlStack


class NetworkStack(MlStack):
    """VPC (private subnets, endpoints, flow logs) and the customer-managed key every stack encrypts with.

    The key and the flow-log group are retained when the stack is deleted (unless `removal: destroy`):
    deleting the network must never destroy the key that encrypts data elsewhere. The stack itself has
    termination protection in retained blueprints.
    """

    def __init__(self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: ML VPC, endpoints, flow logs and the project KMS key",
            # Other stacks read this one's outputs through Fn::GetStackOutput, a weak reference that CloudFormation
            # does not guard: termination protection does, unless the blueprint is a `removal: destroy` sandbox.
            termination_protection=blueprint.retain,
            **kwargs,
        )
        design = network_design(blueprint)
        self.key = ProjectKey(
            self,
            "ProjectKey",
            description=f"mlstack {blueprint.name}: encrypts volumes, logs, file systems and buckets",
            alias=f"alias/mlstack/{blueprint.name}",
            removal_policy=self.removal_policy,
            pending_window=Duration.days(design.key_pending_window_days),
        )
        # The key policy grows with the layers the blueprint has; only this stack, the key's owner, edits it.
        if design.key.ebs_through_ec2:
            self.key.allow_ebs_through_ec2()
        if design.key.alarms_to_sns:
            self.key.allow_cloudwatch_alarms_to_sns()
        if design.key.budgets_to_sns:
            self.key.allow_budgets_to_sns()
        if design.key.eventbridge_to_sns:
            self.key.allow_eventbridge_to_sns()
        self.network = MlVpc(
            self,
            "Network",
            zones=design.zones,
            zones_are_ids=design.zones_are_ids,
            key=self.key,
            cidr=design.cidr,
            nat_gateways=design.nat_gateways,
            private_subnet_mask=design.private_subnet_mask,
            interface_endpoints=design.interface_services,
            gateway_endpoints=design.gateway_endpoints,
            flow_log_retention=retention(design.flow_log_retention_days),
            flow_log_traffic=ec2.FlowLogTrafficType[design.flow_log_traffic],
            removal_policy=self.removal_policy,
        )
        self.vpc = self.network.vpc
        if blueprint.inference_eks is not None:
            # Where the AWS cloud provider puts internal load balancers of `type: LoadBalancer` Services (EKS User
            # Guide, "Tag subnets for load balancers": kubernetes.io/role/internal-elb on private subnets).
            for subnet in self.network.private_subnets:
                Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
