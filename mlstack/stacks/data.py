"""`DataStack`: what must be filled before a model can exist (the model bucket, a same-account image repository).

It deploys before the `InferenceStack`: SageMaker's CreateModel reads the model artifact and the image when the
endpoint stack creates the model, so both must be uploaded/pushed in between (`mlstack precheck` says what is
still missing). A bucket created in the same stack as the model would still be empty at CreateModel.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.inference import EcrImage
from mlstack.constructs.scanners import acknowledge_nag, skip_checkov, skip_guard
from mlstack.precheck import MODEL_BUCKET_OUTPUT
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack

NONCURRENT = s3.LifecycleRule(
    id="ExpireOldVersions",
    noncurrent_version_expiration=Duration.days(90),
    abort_incomplete_multipart_upload_after=Duration.days(7),
)
"""Versioning keeps overwritten artifacts and results recoverable for 90 days, not forever."""

GUARD_BUCKET_SKIPS = {
    "CT.S3.PR.4": "nothing consumes this bucket's object events (no function, queue or rule reads them); a "
    "notification configuration without a consumer would only add a target to secure",
    "CT.S3.PR.9": "Object Lock would keep every version undeletable for its retention period, while noncurrent "
    "versions here expire after 90 days (ExpireOldVersions); immutable records belong in a bucket made for them",
}
"""The Control Tower controls every data bucket skips, with the reason (AWS Guard rules, tests/template_checks)."""

REPOSITORY_OUTPUT = "ImageRepositoryUri"


def access_log_bucket(scope: MlStack) -> s3.Bucket:
    """An SSE-S3 bucket for S3 server access logs (the only encryption S3 delivers logs to), retained per policy.

    Construct ID `AccessLogs` in `scope`: every layer stack that logs bucket access has one.
    """
    bucket = s3.Bucket(
        scope,
        "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        removal_policy=scope.removal_policy,
        lifecycle_rules=[NONCURRENT],
    )
    recurse = "this is the access-log target bucket; logging it would recurse"
    acknowledge_nag(bucket, {"AwsSolutions-S1": recurse})
    skip_checkov(bucket, {"CKV_AWS_18": recurse})
    skip_guard(
        bucket,
        {
            "CT.S3.PR.2": recurse,
            # S3 User Guide, "Enabling Amazon S3 server access logging": the target bucket must use SSE-S3.
            "CT.S3.PR.10": "S3 delivers server access logs only to a bucket encrypted with SSE-S3, not SSE-KMS",
            **GUARD_BUCKET_SKIPS,
        },
    )
    return bucket


def kms_bucket(
    scope: MlStack, construct_id: str, key: kms.IKey, access_logs: s3.IBucket, *, log_prefix: str | None = None
) -> s3.Bucket:
    """A versioned, TLS-only bucket encrypted with `key`, logging to `access_logs` under `log_prefix` (default
    `<construct_id>/`), retained per policy. Every stack's data bucket is made here."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.KMS,
        encryption_key=key,
        bucket_key_enabled=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=log_prefix if log_prefix is not None else f"{construct_id}/",
        removal_policy=scope.removal_policy,
        lifecycle_rules=[NONCURRENT],
    )
    skip_guard(bucket, GUARD_BUCKET_SKIPS)
    return bucket


class DataStack(MlStack):
    """The model bucket (unless the blueprint names an existing one) and, for an `ecr` image with
    `create_repository`, its ECR repository (project key, scan on push, immutable tags). Both retained unless
    `removal: destroy`. Termination protection in retained blueprints: the endpoint stack reads this stack's
    outputs through weak references, which CloudFormation does not guard."""

    def __init__(
        self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, network: NetworkStack, **kwargs: Any
    ) -> None:
        config = blueprint.inference
        if config is None:
            raise ValueError("DataStack needs a blueprint with an `inference:` section")
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: model bucket and image repository (fill before the endpoints)",
            termination_protection=blueprint.retain,
            **kwargs,
        )
        self.add_stack_dependency(network)
        artifact = config.model.artifact
        self.model_bucket: s3.IBucket
        if artifact.existing_bucket is None:
            self.access_logs: s3.Bucket | None = access_log_bucket(self)
            self.model_bucket = kms_bucket(self, "ModelBucket", network.key, self.access_logs)
        else:
            self.access_logs = None
            existing_key = (
                kms.Key.from_key_arn(self, "ExistingModelKey", artifact.existing_bucket_key_arn)
                if artifact.existing_bucket_key_arn
                else None
            )
            self.model_bucket = s3.Bucket.from_bucket_attributes(
                self, "ExistingModelBucket", bucket_name=artifact.existing_bucket, encryption_key=existing_key
            )
        CfnOutput(self, MODEL_BUCKET_OUTPUT, value=self.model_bucket.bucket_name)
        CfnOutput(self, "ModelArtifact", value=self.model_bucket.s3_url_for_object(artifact.key))

        image = config.model.image
        self.repository: ecr.IRepository | None = None
        if isinstance(image, EcrImage) and image.create_repository:
            self.repository = ecr.Repository(
                self,
                "ImageRepository",
                # The blueprint names the repository: `docker push` needs the name before this stack exists.
                repository_name=image.repository,
                encryption=ecr.RepositoryEncryption.KMS,
                encryption_key=network.key,
                image_scan_on_push=True,
                image_tag_mutability=ecr.TagMutability.IMMUTABLE,
                removal_policy=self.removal_policy,
                empty_on_delete=False,
            )
            skip_guard(
                self.repository,
                {
                    "CT.ECR.PR.1": "holds the endpoint's image, which the InferenceStack names by tag; any expiry "
                    "rule could delete an image a model still uses, and immutable tags leave nothing to sweep",
                },
            )
            CfnOutput(self, REPOSITORY_OUTPUT, value=self.repository.repository_uri_for_tag(image.tag))
