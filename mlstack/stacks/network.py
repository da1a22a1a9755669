"""`NetworkStack`: the VPC and the project KMS key that later stacks share."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.network import INTERFACE_ENDPOINTS
from mlstack.constructs.network.ml_vpc import MlVpc, retention
from mlstack.constructs.security.project_key import ProjectKey
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
        self.key = ProjectKey(
            self,
            "ProjectKey",
            description=f"mlstack {blueprint.name}: encrypts volumes, logs, file systems and buckets",
            alias=f"alias/mlstack/{blueprint.name}",
            removal_policy=self.removal_policy,
            pending_window=Duration.days(30 if blueprint.retain else 7),
        )
        # The key policy grows with the layers the blueprint has; only this stack, the key's owner, edits it.
        if blueprint.training is not None or blueprint.inference_eks is not None:
            # Managed node groups launch through EC2 Auto Scaling with volumes encrypted with this key.
            self.key.allow_ebs_through_ec2()
        ai_services = blueprint.ai_services
        if blueprint.inference is not None or (ai_services is not None and ai_services.document_pipeline is not None):
            # The inference stack's and the document pipeline's alarm topics are encrypted with this key.
            self.key.allow_cloudwatch_alarms_to_sns()
        if blueprint.mlops is not None:
            # MlopsStack's alarm topic: CloudWatch alarms and EventBridge rules (failed executions, monitoring) publish.
            self.key.allow_cloudwatch_alarms_to_sns()
            self.key.allow_eventbridge_to_sns()
        network = blueprint.network
        self.network = MlVpc(
            self,
            "Network",
            zones=blueprint.zones,
            zones_are_ids=network.uses_az_ids,
            key=self.key,
            cidr=str(network.cidr),
            nat_gateways=network.nat_gateways,
            private_subnet_mask=network.private_subnet_mask,
            # Each allowed blueprint key is the endpoint's service name suffix (com.amazonaws.<region>.<key>).
            interface_endpoints=[INTERFACE_ENDPOINTS[k] for k in network.interface_endpoints],
            gateway_endpoints=network.gateway_endpoints,
            flow_log_retention=retention(network.flow_logs.retention_days),
            flow_log_traffic=ec2.FlowLogTrafficType[network.flow_logs.traffic],
            removal_policy=self.removal_policy,
        )
        self.vpc = self.network.vpc
        if blueprint.inference_eks is not None:
            # Where the AWS cloud provider puts internal load balancers of `type: LoadBalancer` Services (EKS User
            # Guide, "Tag subnets for load balancers": kubernetes.io/role/internal-elb on private subnets).
            for subnet in self.network.private_subnets:
                Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
