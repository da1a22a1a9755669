"""`InferenceStack`: model buckets and the blueprint's SageMaker endpoints; `plan_inference` for `mlstack plan`."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnOutput, Duration, Validations
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.inference import InferenceConfig
from mlstack.constructs.inference import InvokeApi, ModelEndpoint, ServingImage
from mlstack.constructs.scanners import skip_checkov
from mlstack.stacks.base import MlStack
from mlstack.stacks.inference_plan import plan_inference
from mlstack.stacks.network import NetworkStack

__all__ = ["InferenceStack", "plan_inference"]

_NONCURRENT = s3.LifecycleRule(
    id="ExpireOldVersions",
    noncurrent_version_expiration=Duration.days(90),
    abort_incomplete_multipart_upload_after=Duration.days(7),
)
"""Versioning keeps overwritten artifacts and results recoverable for 90 days, not forever."""


class InferenceStack(MlStack):
    """The blueprint's model endpoints, in the NetworkStack's private subnets, encrypted with its key.

    Creates (retained unless `removal: destroy`): an access-log bucket; the model bucket (unless the blueprint
    names an existing one); a data bucket for data capture and async results when an endpoint needs one.
    Then one `ModelEndpoint` per `inference.endpoints` entry and, if asked, an `InvokeApi`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        config = blueprint.inference
        if config is None:
            raise ValueError("InferenceStack needs a blueprint with an `inference:` section")
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: SageMaker endpoints ({', '.join(_modes(config))})",
            **kwargs,
        )
        self.add_stack_dependency(network)
        key = network.key
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging delivers only to SSE-S3 buckets.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=self.removal_policy,
            lifecycle_rules=[_NONCURRENT],
        )
        Validations.of(self.access_logs).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1", reason="this is the access-log target bucket; logging it would recurse"
            )
        )
        skip_checkov(self.access_logs, {"CKV_AWS_18": "this is the access-log target bucket; logging it would recurse"})
        artifact = config.model.artifact
        self.model_bucket: s3.IBucket
        if artifact.existing_bucket is None:
            self.model_bucket = self._bucket("ModelBucket", key)
        else:
            existing_key = (
                kms.Key.from_key_arn(self, "ExistingModelKey", artifact.existing_bucket_key_arn)
                if artifact.existing_bucket_key_arn
                else None
            )
            self.model_bucket = s3.Bucket.from_bucket_attributes(
                self, "ExistingModelBucket", bucket_name=artifact.existing_bucket, encryption_key=existing_key
            )
        self.data_bucket = self._bucket("DataBucket", key) if config.needs_data_bucket else None

        image = ServingImage.from_config(config.model.image)
        self.endpoints: dict[str, ModelEndpoint] = {}
        for spec in config.endpoints:
            endpoint = ModelEndpoint(
                self,
                spec.construct_id,
                spec=spec,
                image=image,
                artifact_bucket=self.model_bucket,
                artifact_key=artifact.key,
                key=key,
                vpc=network.vpc,
                subnets=network.network.private_subnets,
                data_bucket=self.data_bucket,
                environment=config.model.environment,
            )
            self.endpoints[spec.name] = endpoint
            CfnOutput(self, f"{spec.construct_id}EndpointName", value=endpoint.endpoint_name)

        self.invoke_api: InvokeApi | None = None
        if config.invoke_api is not None:
            self.invoke_api = InvokeApi(
                self,
                "InvokeApi",
                endpoint=self.endpoints[config.invoke_api.endpoint],
                key=key,
                removal_policy=self.removal_policy,
                timeout=Duration.seconds(config.invoke_api.timeout_seconds),
                memory_size=config.invoke_api.memory_mb,
                log_retention=logs.RetentionDays.ONE_YEAR,
            )
            CfnOutput(self, "InvokeUrl", value=self.invoke_api.url_string)
        CfnOutput(self, "ModelArtifact", value=self.model_bucket.s3_url_for_object(artifact.key))

    def _bucket(self, construct_id: str, key: kms.IKey) -> s3.Bucket:
        return s3.Bucket(
            self,
            construct_id,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{construct_id}/",
            removal_policy=self.removal_policy,
            lifecycle_rules=[_NONCURRENT],
        )


def _modes(config: InferenceConfig) -> list[str]:
    return sorted({e.mode for e in config.endpoints})
