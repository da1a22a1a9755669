"""`DataStack`: what must be filled before a model can exist (the model bucket, a same-account image repository).

It deploys before the `InferenceStack`: SageMaker's CreateModel reads the model artifact and the image when the
endpoint stack creates the model, so both must be uploaded/pushed in between (`mlstack precheck` says what is
still missing). A bucket created in the same stack as the model would still be empty at CreateModel.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.storage.buckets import access_log_bucket, kms_bucket
from mlstack.design.inference import inference_storage
from mlstack.precheck import MODEL_BUCKET_OUTPUT
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack

REPOSITORY_OUTPUT = "ImageRepositoryUri"


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
        storage = inference_storage(config)
        self.model_bucket: s3.IBucket
        if storage.model_bucket:
            self.access_logs: s3.Bucket | None = access_log_bucket(self, removal_policy=self.removal_policy)
            self.model_bucket = kms_bucket(
                self, "ModelBucket", key=network.key, access_logs=self.access_logs, removal_policy=self.removal_policy
            )
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
        if storage.image_repository is not None:
            self.repository = ecr.Repository(
                self,
                "ImageRepository",
                # The blueprint names the repository: `docker push` needs the name before this stack exists.
                repository_name=storage.image_repository,
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
