"""`AiServicesStack`: the blueprint's AI service API and document pipeline (planned by `mlstack.plan.ai_services`)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.constructs.ai_services import AiServiceApi, DocumentPipeline, Guardrail
from mlstack.constructs.ai_services.api import MEDIA_PREFIX
from mlstack.constructs.ai_services.document_pipeline import INPUT_PREFIX
from mlstack.constructs.storage.buckets import access_log_bucket, kms_bucket
from mlstack.design.ai_services import needs_media_bucket
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack

__all__ = ["AiServicesStack"]


class AiServicesStack(MlStack):
    """Managed AI services behind least-privilege roles, encrypted with the NetworkStack's project key.

    Creates (retained unless `removal: destroy`): an access-log bucket; with `document_pipeline`, a
    `DocumentPipeline` (documents bucket, index table, dead-letter queue, state machine); with `api`, an
    `AiServiceApi` and, when Transcribe is one of its operations, a media bucket. Nothing here runs in the VPC.
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
        config = blueprint.ai_services
        if config is None:
            raise ValueError("AiServicesStack needs a blueprint with an `ai_services:` section")
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: AI services ({', '.join(config.services)})",
            **kwargs,
        )
        self.add_stack_dependency(network)
        key = network.key
        self.access_logs = access_log_bucket(self, removal_policy=self.removal_policy)
        self.pipeline: DocumentPipeline | None = None
        self.alarm_topic: sns.Topic | None = None
        if config.document_pipeline is not None:
            spec = config.document_pipeline
            self.alarm_topic = self.add_alarm_topic(key, config.alarm_emails)
            self.pipeline = DocumentPipeline(
                self,
                "DocumentPipeline",
                key=key,
                removal_policy=self.removal_policy,
                access_logs_bucket=self.access_logs,
                language=spec.language,
                pii_redaction=spec.pii_redaction,
                max_pages=spec.max_pages,
                poll_interval=Duration.seconds(spec.poll_seconds),
                max_polls=spec.max_polls,
                log_retention=logs.RetentionDays.ONE_YEAR,
                alarm_topic=self.alarm_topic,
            )
            CfnOutput(
                self, "UploadTo", value=f"s3://{self.pipeline.bucket.bucket_name}/{INPUT_PREFIX}", description="upload"
            )
            CfnOutput(self, "IndexTable", value=self.pipeline.table.table_name)
        self.media_bucket: s3.Bucket | None = None
        self.api: AiServiceApi | None = None
        if config.api is not None:
            api = config.api
            if needs_media_bucket(config):
                self.media_bucket = kms_bucket(
                    self,
                    "MediaBucket",
                    key=key,
                    access_logs=self.access_logs,
                    log_prefix="media/",
                    removal_policy=self.removal_policy,
                )
                CfnOutput(self, "MediaUploadTo", value=f"s3://{self.media_bucket.bucket_name}/{MEDIA_PREFIX}")
            user_pool = clients = None
            if api.cognito_user_pool_id is not None:
                user_pool = cognito.UserPool.from_user_pool_id(self, "UserPool", api.cognito_user_pool_id)
                clients = [
                    cognito.UserPoolClient.from_user_pool_client_id(self, f"Client{i}", client)
                    for i, client in enumerate(api.cognito_client_ids)
                ]
            bedrock = api.bedrock
            guardrail = bedrock.guardrail if bedrock else None
            self.api = AiServiceApi(
                self,
                "Api",
                operations=api.operations,
                key=key,
                removal_policy=self.removal_policy,
                user_pool=user_pool,
                user_pool_clients=clients or (),
                language=api.language,
                bedrock_model_ids=bedrock.model_ids if bedrock else (),
                guardrail=Guardrail(guardrail.id, guardrail.version or "") if guardrail else None,
                max_tokens=bedrock.max_tokens if bedrock else 1024,
                media_bucket=self.media_bucket,
                throttle_rate_limit=api.throttle.rate_limit,
                throttle_burst_limit=api.throttle.burst_limit,
                timeout=Duration.seconds(api.timeout_seconds),
                memory_size=api.memory_mb,
                log_retention=logs.RetentionDays.ONE_YEAR,
            )
            CfnOutput(self, "ApiUrl", value=self.api.url)
