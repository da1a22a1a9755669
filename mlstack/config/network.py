"""The `network:` section of a blueprint: the ML VPC every other stack is placed in."""

from __future__ import annotations

import re
from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.common import LOG_RETENTION_DAYS
from mlstack.config.base import StrictModel

# Interface endpoint keys a blueprint may ask for, mapped to the service name suffix
# (com.amazonaws.<region>.<suffix>). Kept in the config layer so validation needs no CDK import.
INTERFACE_ENDPOINTS: dict[str, str] = {
    "ecr.api": "ecr.api",
    "ecr.dkr": "ecr.dkr",
    "sts": "sts",
    "logs": "logs",
    "monitoring": "monitoring",
    "sagemaker.api": "sagemaker.api",
    "sagemaker.runtime": "sagemaker.runtime",
    "ssm": "ssm",
    "ssmmessages": "ssmmessages",
    "ec2messages": "ec2messages",
    "ec2": "ec2",
    "eks": "eks",
    "eks-auth": "eks-auth",
    "elasticloadbalancing": "elasticloadbalancing",
    "autoscaling": "autoscaling",
    "kms": "kms",
    "secretsmanager": "secretsmanager",
    "sqs": "sqs",
    "sns": "sns",
    "bedrock-runtime": "bedrock-runtime",
    "fsx": "fsx",
    "ecs": "ecs",
    "ecs-agent": "ecs-agent",
    "ecs-telemetry": "ecs-telemetry",
}
"""Allowed `network.interface_endpoints` entries."""

DEFAULT_INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "ecr.api",
    "ecr.dkr",
    "sts",
    "logs",
    "monitoring",
    "sagemaker.api",
    "sagemaker.runtime",
    "ssm",
)
"""The default of a network with an MLOps or AI-services layer (and of a bare `NetworkConfig`): image pulls,
credentials, logs/metrics, SageMaker, SSM."""

TRAINING_INTERFACE_ENDPOINTS: dict[str, str] = {
    "ecr.api": "nodes pull add-on, device-plugin and training images (registry API; layers come through S3)",
    "ecr.dkr": "nodes pull add-on, device-plugin and training images (Docker registry endpoint)",
    "sts": "the kubectl handler and SDKs in pods exchange credentials",
    "logs": "Fluent Bit (amazon-cloudwatch-observability) ships container logs",
    "monitoring": "the CloudWatch agent publishes Container Insights, GPU and Neuron metrics",
    "ec2": "the VPC CNI attaches ENIs and assigns pod IPs through the EC2 API on every node",
    "eks-auth": "EKS Pod Identity (the vpc-cni and CloudWatch agent roles) fetches credentials",
}
"""What a training cluster's nodes and add-ons call, with the reason; no SageMaker endpoints (nothing uses them)."""

ADMIN_HOST_INTERFACE_ENDPOINTS: dict[str, str] = {
    "ssm": "the SSM agent of the cluster admin host registers with Systems Manager",
    "ssmmessages": "Session Manager sessions to the admin host",
    "ec2messages": "the SSM agent of the admin host receives commands",
}
"""Added when the training layer ships its SSM-managed admin host."""


INFERENCE_INTERFACE_ENDPOINTS: dict[str, str] = {
    "ecr.api": "real-time and async endpoint hosts pull the serving image (registry API; layers come through S3)",
    "ecr.dkr": "real-time and async endpoint hosts pull the serving image (Docker registry endpoint)",
}
"""What an inference layer's hosts in the VPC call, besides S3 (gateway endpoint) for the artifact and image layers.
Nothing else: SageMaker publishes endpoint logs and metrics itself, outside the customer VPC; the invoke function
runs outside the VPC; serverless endpoints run outside the VPC and need none."""


HYPERPOD_INTERFACE_ENDPOINTS: dict[str, str] = {
    "sagemaker.api": "HyperPod nodes in a private VPC reach the SageMaker API (SageMaker HyperPod docs, HyperPod "
    "training operator prerequisites: PrivateLink endpoints for sagemaker.api and eks-auth)",
    "ssmmessages": "`aws ssm start-session --target sagemaker-cluster:...` into HyperPod nodes (the execution role "
    "opens Session Manager channels)",
    "logs": "HyperPod uploads lifecycle-script and node logs to /aws/sagemaker/Clusters/...",
    "monitoring": "HyperPod node metrics (PutMetricData, /aws/sagemaker/Clusters namespace)",
    "sts": "SDK credential exchange on the nodes",
}
"""What HyperPod nodes call (both orchestrators; hyperpod-eks adds the EKS nodes' `TRAINING_INTERFACE_ENDPOINTS`)."""

BATCH_INTERFACE_ENDPOINTS: dict[str, str] = {
    "ecs": "the ECS agent on Batch compute instances (Amazon ECS developer guide, Amazon ECS interface VPC endpoints: "
    "ecs-agent, ecs-telemetry and ecs are needed together, or traffic takes the public endpoints)",
    "ecs-agent": "the ECS agent's control channel",
    "ecs-telemetry": "the ECS agent's metrics channel",
    "ecr.api": "job containers are pulled from ECR (registry API; layers come through S3)",
    "ecr.dkr": "job containers are pulled from ECR (Docker registry endpoint)",
    "logs": "the awslogs driver ships job output to the job log group; the CloudWatch agent the kernel log",
    "monitoring": "the CloudWatch agent on GPU hosts publishes per-GPU and EFA metrics (PutMetricData)",
    "sts": "SDK credential exchange in the job containers",
}
"""What AWS Batch (ECS) compute instances call; no EKS, SageMaker or SSM endpoints (nothing there uses them)."""


def default_interface_endpoints(
    *,
    training: bool,
    admin_host: bool,
    inference: bool,
    inference_in_vpc: bool = True,
    others: bool = False,
    engine: str = "eks",
) -> list[str]:
    """The interface endpoints a blueprint gets when `network.interface_endpoints` is not given: what its layers use.

    An inference layer adds `INFERENCE_INTERFACE_ENDPOINTS` when an endpoint runs in the VPC (`inference_in_vpc`:
    not only serverless ones). A training layer adds what its engine's nodes call: EKS nodes (`eks`,
    `hyperpod-eks`) `TRAINING_INTERFACE_ENDPOINTS` and SSM for the admin host, HyperPod nodes
    `HYPERPOD_INTERFACE_ENDPOINTS`, Batch instances `BATCH_INTERFACE_ENDPOINTS`. Other layers (`others`: MLOps, AI
    services) and a network with no layer keep `DEFAULT_INTERFACE_ENDPOINTS`.
    """
    keys: list[str] = list(DEFAULT_INTERFACE_ENDPOINTS) if others or not (training or inference) else []
    wanted: list[str] = []
    if inference and inference_in_vpc:
        wanted += INFERENCE_INTERFACE_ENDPOINTS
    if training and engine in ("eks", "hyperpod-eks"):
        wanted += TRAINING_INTERFACE_ENDPOINTS
        if admin_host:
            wanted += ADMIN_HOST_INTERFACE_ENDPOINTS
    if training and engine in ("hyperpod-slurm", "hyperpod-eks"):
        wanted += HYPERPOD_INTERFACE_ENDPOINTS
    if training and engine == "batch":
        wanted += BATCH_INTERFACE_ENDPOINTS
    for key in wanted:
        if key not in keys:
            keys.append(key)
    return keys


_AZ_NAME = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
_AZ_ID = re.compile(r"^[a-z]{2,4}\d-az\d{1,2}$")

GatewayEndpoint = Literal["s3", "dynamodb"]
EndpointKey = Annotated[str, Field(description=f"One of: {', '.join(INTERFACE_ENDPOINTS)}")]


class FlowLogConfig(StrictModel):
    retention_days: int = 365
    """Days CloudWatch Logs keeps VPC flow logs (one of the CloudWatch retention values)."""
    traffic: Literal["ALL", "ACCEPT", "REJECT"] = "ALL"

    @field_validator("retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            allowed = ", ".join(str(v) for v in LOG_RETENTION_DAYS)
            raise ValueError(f"{value} is not a CloudWatch Logs retention period; use one of {allowed}")
        return value


class NetworkConfig(StrictModel):
    cidr: IPv4Network = IPv4Network("10.0.0.0/16")
    """VPC CIDR, /16 to /24. EFA-only interfaces use no IP, but ENA primaries and pods do: size generously."""
    availability_zones: list[str] | None = None
    """AZ names (us-east-1a ...). Names map to different physical AZs per account: prefer availability_zone_ids."""
    availability_zone_ids: list[str] | None = None
    """AZ IDs (use1-az4 ...), the same physical AZ in every account; where capacity (p5, trn) actually is."""
    max_azs: int = Field(default=2, ge=1, le=6)
    """AZs to use when neither list is given: the region's a, b, ... names."""
    nat_gateways: int = Field(default=1, ge=0, le=6)
    """NAT gateways (one per AZ for HA). 0 makes the private subnets isolated: no NAT, no public subnets."""
    private_subnet_mask: int = Field(default=18, ge=16, le=28)
    """Prefix length of each private subnet (/18 = 16,379 usable IPs)."""
    interface_endpoints: list[EndpointKey] = Field(default_factory=lambda: list(DEFAULT_INTERFACE_ENDPOINTS))
    """Interface VPC endpoints. Unset in a blueprint: what its layers use (`default_interface_endpoints`); a list
    given here wins."""
    gateway_endpoints: list[GatewayEndpoint] = Field(default_factory=lambda: list[GatewayEndpoint](["s3"]))
    flow_logs: FlowLogConfig = Field(default_factory=FlowLogConfig)

    @field_validator("cidr")
    @classmethod
    def _cidr_size(cls, value: IPv4Network) -> IPv4Network:
        if not 16 <= value.prefixlen <= 24:
            raise ValueError(f"a VPC CIDR must be /16 to /24 (AWS limit), got /{value.prefixlen}; use e.g. 10.0.0.0/16")
        if not value.is_private:
            raise ValueError(f"{value} is not an RFC 1918 private range; use e.g. 10.0.0.0/16")
        return value

    @field_validator("availability_zones")
    @classmethod
    def _az_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for name in value:
            if not _AZ_NAME.match(name):
                raise ValueError(f"{name!r} is not an AZ name; use names like 'us-east-1a' (or availability_zone_ids)")
        return _unique(value, "availability_zones")

    @field_validator("availability_zone_ids")
    @classmethod
    def _az_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for az_id in value:
            if not _AZ_ID.match(az_id):
                raise ValueError(f"{az_id!r} is not an AZ ID; use IDs like 'use1-az4'")
        return _unique(value, "availability_zone_ids")

    @field_validator("interface_endpoints")
    @classmethod
    def _endpoints(cls, value: list[str]) -> list[str]:
        for key in value:
            if key not in INTERFACE_ENDPOINTS:
                raise ValueError(f"unknown interface endpoint {key!r}; use any of: {', '.join(INTERFACE_ENDPOINTS)}")
        return _unique(value, "interface_endpoints")

    @model_validator(mode="after")
    def _placement(self) -> NetworkConfig:
        if self.availability_zones is not None and self.availability_zone_ids is not None:
            raise ValueError("give availability_zones or availability_zone_ids, not both; IDs are the portable choice")
        azs = self.az_count
        if self.nat_gateways > azs:
            raise ValueError(f"nat_gateways ({self.nat_gateways}) exceeds the number of AZs ({azs}); use at most {azs}")
        # public /24 + private subnets per AZ must fit in the CIDR.
        needed = azs * (2 ** (32 - self.private_subnet_mask) + (256 if self.nat_gateways else 0))
        if needed > self.cidr.num_addresses:
            raise ValueError(
                f"{azs} AZs of /{self.private_subnet_mask} private subnets do not fit in {self.cidr}; "
                f"use a larger cidr or a longer private_subnet_mask"
            )
        return self

    @property
    def az_count(self) -> int:
        chosen = self.availability_zones or self.availability_zone_ids
        return len(chosen) if chosen else self.max_azs

    def zones(self, region: str) -> list[str]:
        """The AZ names or IDs this network spans, in order (the first is the default training AZ)."""
        if self.availability_zone_ids:
            return list(self.availability_zone_ids)
        if self.availability_zones:
            return list(self.availability_zones)
        return [f"{region}{chr(ord('a') + i)}" for i in range(self.max_azs)]

    @property
    def uses_az_ids(self) -> bool:
        return self.availability_zone_ids is not None


def _unique(values: list[str], field: str) -> list[str]:
    dupes = sorted({v for v in values if values.count(v) > 1})
    if dupes:
        raise ValueError(f"{field} lists {', '.join(dupes)} more than once; list each once")
    return values
