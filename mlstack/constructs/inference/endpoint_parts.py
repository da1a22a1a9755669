"""`EndpointParts`: what a `ModelEndpoint`'s mode strategies (`serving.py`) and alarms (`alarms.py`) use of it.

A base class of `ModelEndpoint` that imports neither: the strategies take these parts, build the mode's pieces in
them and return what they made (an async endpoint's topics), so no module of this package imports another in a
circle.
"""

from __future__ import annotations

from typing import TypedDict, Unpack

from aws_cdk import Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack.constructs.scanners import acknowledge_nag, nag_id

_ONE_MINUTE = Duration.minutes(1)


class MetricOptions(TypedDict, total=False):
    """CloudWatch metric options the `metric_*` methods accept (those of `cloudwatch.MetricOptions`)."""

    statistic: str
    period: Duration
    label: str
    color: str
    unit: cloudwatch.Unit
    account: str
    region: str


def _with(defaults: MetricOptions, options: MetricOptions) -> MetricOptions:
    merged = defaults.copy()
    merged.update(options)
    return merged


class EndpointParts(Construct):
    """The endpoint's key, role, data bucket, model and endpoint, its metrics and the helpers its mode uses.
    `ModelEndpoint` sets the attributes and names its variants."""

    name: str
    key: kms.IKey
    role: iam.Role
    data_bucket: s3.IBucket | None
    model: sagemaker.CfnModel
    endpoint: sagemaker.CfnEndpoint

    @property
    def variant_names(self) -> list[str]:
        """The production variants' names (`ModelEndpoint` knows them from its mode)."""
        raise NotImplementedError

    @property
    def endpoint_name(self) -> str:
        return self.endpoint.attr_endpoint_name

    @property
    def endpoint_arn(self) -> str:
        return self.endpoint.ref  # Ref of AWS::SageMaker::Endpoint is its ARN

    def metric(
        self, metric_name: str, *, variant: str | None = None, **options: Unpack[MetricOptions]
    ) -> cloudwatch.Metric:
        """An `AWS/SageMaker` metric of one variant (default: the first). Default: Average over one minute."""
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name, "VariantName": variant or self.variant_names[0]},
            **_with({"statistic": "Average", "period": _ONE_MINUTE}, options),
        )

    def endpoint_metric(self, metric_name: str, **options: Unpack[MetricOptions]) -> cloudwatch.Metric:
        """An `AWS/SageMaker` metric with the EndpointName dimension only (the async backlog metrics)."""
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name},
            **_with({"statistic": "Average", "period": _ONE_MINUTE}, options),
        )

    def metric_model_latency(
        self, *, variant: str | None = None, **options: Unpack[MetricOptions]
    ) -> cloudwatch.Metric:
        """Time the model container takes to answer, in microseconds. Default statistic: p99."""
        return self.metric("ModelLatency", variant=variant, **_with({"statistic": "p99"}, options))

    def metric_invocations(self, *, variant: str | None = None, **options: Unpack[MetricOptions]) -> cloudwatch.Metric:
        return self.metric("Invocations", variant=variant, **_with({"statistic": "Sum"}, options))

    def metric_invocation_5xx_errors(
        self, *, variant: str | None = None, **options: Unpack[MetricOptions]
    ) -> cloudwatch.Metric:
        return self.metric("Invocation5XXErrors", variant=variant, **_with({"statistic": "Sum"}, options))

    def metric_invocation_4xx_errors(
        self, *, variant: str | None = None, **options: Unpack[MetricOptions]
    ) -> cloudwatch.Metric:
        return self.metric("Invocation4XXErrors", variant=variant, **_with({"statistic": "Sum"}, options))

    def metric_approximate_backlog_size_per_instance(self, **options: Unpack[MetricOptions]) -> cloudwatch.Metric:
        """Async only: queued requests per instance (the autoscaling target metric)."""
        return self.endpoint_metric("ApproximateBacklogSizePerInstance", **options)

    def metric_has_backlog_without_capacity(self, **options: Unpack[MetricOptions]) -> cloudwatch.Metric:
        """Async only: 1 while requests wait and no instance runs (the scale-out-from-zero signal)."""
        return self.endpoint_metric("HasBacklogWithoutCapacity", **options)

    def require_data_bucket(self) -> s3.IBucket:
        if self.data_bucket is None:
            raise ValueError(f"endpoint {self.name!r} needs data_bucket")
        return self.data_bucket

    def grant_write(self, prefix: str) -> None:
        """Let the execution role write objects under `prefix/` of the data bucket (KMS)."""
        bucket = self.require_data_bucket()
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects(f"{prefix}/*")])
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self.key.key_arn])
        )
        self.acknowledge_prefix(prefix, "writes objects whose keys SageMaker generates under this prefix")

    def acknowledge_prefix(self, prefix: str, why: str) -> None:
        arn = self.require_data_bucket().arn_for_objects(f"{prefix}/*")
        acknowledge_nag(self.role, {f"AwsSolutions-IAM5[Resource::{nag_id(Stack.of(self), arn)}]": f"SageMaker {why}"})

    def scalable_target(
        self, construct_id: str, variant: str, role: iam.IRole, min_capacity: int, max_capacity: int
    ) -> appscaling.ScalableTarget:
        return appscaling.ScalableTarget(
            self,
            construct_id,
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{self.endpoint_name}/variant/{variant}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=min_capacity,
            max_capacity=max_capacity,
            role=role,
        )
