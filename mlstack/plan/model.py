"""The plan's data model: what a blueprint creates (`Resource`), what it costs (`Cost`), which quotas it needs
(`Quota`), gathered in a `Plan`. Layer modules fill a `Plan`; `mlstack.plan.render` prints it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

HOURS_PER_MONTH = 730
"""AWS pricing pages' convention for a month of on-demand use."""


KIND_TYPES: dict[str, str | None] = {
    "Admin host": "AWS::EC2::Instance",
    "Batch compute environment": "AWS::Batch::ComputeEnvironment",
    "Batch job definition": "AWS::Batch::JobDefinition",
    "Batch job queue": "AWS::Batch::JobQueue",
    "CloudWatch alarm": "AWS::CloudWatch::Alarm",
    "DynamoDB table": "AWS::DynamoDB::Table",
    "ECR repository": "AWS::ECR::Repository",
    "EFA security group": "AWS::EC2::SecurityGroup",
    "EKS cluster": "AWS::EKS::Cluster",
    "EventBridge rule": "AWS::Events::Rule",
    "Flow logs": "AWS::EC2::FlowLog",
    "FSx for Lustre": "AWS::FSx::FileSystem",
    "Gateway endpoint": "AWS::EC2::VPCEndpoint",
    "GPU/Neuron metrics": "AWS::EKS::Addon",
    "Helm charts": "Custom::AWSCDK-EKS-HelmChart",
    "HTTP API": "AWS::ApiGatewayV2::Api",
    "HyperPod chart installer": "Custom::HyperPodDependencies",
    "HyperPod cluster": "AWS::SageMaker::Cluster",
    "IAM role": "AWS::IAM::Role",
    "Interface endpoint": "AWS::EC2::VPCEndpoint",
    "KMS key": "AWS::KMS::Key",
    "Lambda function": "AWS::Lambda::Function",
    "Lambda function URL": "AWS::Lambda::Url",
    "Launch template": "AWS::EC2::LaunchTemplate",
    "Log group": "AWS::Logs::LogGroup",
    "Model package group": "AWS::SageMaker::ModelPackageGroup",
    "NAT gateway": "AWS::EC2::NatGateway",
    "Node group": "AWS::EKS::Nodegroup",
    "Placement group": "AWS::EC2::PlacementGroup",
    "Private subnet": "AWS::EC2::Subnet",
    "Public subnet": "AWS::EC2::Subnet",
    "S3 bucket": "AWS::S3::Bucket",
    "SageMaker endpoint": "AWS::SageMaker::Endpoint",
    "SageMaker pipeline": "AWS::SageMaker::Pipeline",
    "Security group rules": "AWS::EC2::SecurityGroupIngress",
    "SNS topic": "AWS::SNS::Topic",
    "SQS queue": "AWS::SQS::Queue",
    "Step Functions state machine": "AWS::StepFunctions::StateMachine",
    "Studio domain": "AWS::SageMaker::Domain",
    "System node group": "AWS::EKS::Nodegroup",
    "VPC": "AWS::EC2::VPC",
    # Facts about a resource above, not resources of their own:
    "Instance group": None,
    "SageMaker instance": None,
}
"""The CloudFormation type of each `Resource.kind` the layer modules write; None for a row that describes
capacity inside another resource (a HyperPod instance group, an endpoint's instances)."""


@dataclass(frozen=True)
class Resource:
    """One row of the plan: `count` resources of CloudFormation `type` in `stack` (`kind` and `detail` for the
    text view). `supporting` rows are the rest of each stack's resources (roles, policies, rules, CDK providers):
    the plan's rows of a stack add up, per type, to its template (tests/plan/test_footprint.py)."""

    stack: str
    kind: str
    detail: str
    count: int = 1
    type: str | None = None
    """Default: `KIND_TYPES[kind]`."""
    supporting: bool = False

    def __post_init__(self) -> None:
        if self.type is None and not self.supporting:
            if self.kind not in KIND_TYPES:
                raise ValueError(f"plan resource kind {self.kind!r} has no CloudFormation type: add it to KIND_TYPES")
            object.__setattr__(self, "type", KIND_TYPES[self.kind])


@dataclass(frozen=True)
class Cost:
    item: str
    quantity: float
    unit_per_hour: float | None
    """USD per unit-hour; None when no price is known (the plan says so instead of guessing)."""
    price_date: str | None
    source: str

    @property
    def per_hour(self) -> float | None:
        return None if self.unit_per_hour is None else self.unit_per_hour * self.quantity


@dataclass(frozen=True)
class Quota:
    service: str
    name: str
    code: str
    needed: float
    unit: str = ""


@dataclass
class Plan:
    blueprint: str
    description: str
    region: str
    removal: str
    stacks: list[str] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    costs: list[Cost] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    """Layer-specific facts (nodes, accelerators, EFA, storage, manifests) for the text and JSON views."""

    @property
    def per_hour(self) -> float:
        """Sum of the known hourly costs (see `unpriced` for what is missing)."""
        return sum(c.per_hour for c in self.costs if c.per_hour is not None)

    @property
    def per_month(self) -> float:
        return self.per_hour * HOURS_PER_MONTH

    @property
    def unpriced(self) -> list[str]:
        return [c.item for c in self.costs if c.unit_per_hour is None]

    @property
    def unpriced_reasons(self) -> dict[str, str]:
        """Each unpriced item and why it has no price (its `source` line)."""
        return {c.item: c.source for c in self.costs if c.unit_per_hour is None}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["costs"] = [{**asdict(c), "per_hour": c.per_hour} for c in self.costs]
        data["per_hour"] = round(self.per_hour, 4)
        data["per_month"] = round(self.per_month, 2)
        data["hours_per_month"] = HOURS_PER_MONTH
        data["unpriced"] = self.unpriced
        data["unpriced_reasons"] = self.unpriced_reasons
        return data
