"""`NetworkStack`: the VPC and the project KMS key that later stacks share."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.constructs.network.ml_vpc import MlVpc
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
        self.key = kms.Key(
            self,
            "ProjectKey",
            description=f"mlstack {blueprint.name}: encrypts volumes, logs, file systems and buckets",
            enable_key_rotation=True,
            alias=f"alias/mlstack/{blueprint.name}",
            removal_policy=self.removal_policy,
            pending_window=Duration.days(30 if blueprint.retain else 7),
        )
        # CloudWatch Logs encrypts log groups of this account and region with the key (flow logs, EKS, ...).
        stack = Stack.of(self)
        logs_arn = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:*"
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchLogs",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": logs_arn}},
            )
        )
        self.network = MlVpc(
            self,
            "Network",
            network=blueprint.network,
            zones=blueprint.zones,
            zones_are_ids=blueprint.network.uses_az_ids,
            key=self.key,
            removal_policy=self.removal_policy,
        )
        self.vpc = self.network.vpc
