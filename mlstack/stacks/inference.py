"""`InferenceStack`: the blueprint's SageMaker endpoints (its part of `mlstack plan` is `mlstack.plan.inference`)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.inference import PAYLOAD_LIMIT_BYTES, InferenceConfig
from mlstack.config.inference_fit import weights_gib
from mlstack.constructs.inference import AlarmThresholds, AsyncServing, InvokeApi, ModelEndpoint
from mlstack.constructs.storage.buckets import access_log_bucket, kms_bucket
from mlstack.design.inference import inference_storage
from mlstack.stacks.base import MlStack
from mlstack.stacks.data import DataStack
from mlstack.stacks.images import serving_image
from mlstack.stacks.inference_props import serving_props
from mlstack.stacks.network import NetworkStack

__all__ = ["InferenceStack"]


class InferenceStack(MlStack):
    """The blueprint's model endpoints, in the NetworkStack's private subnets, encrypted with its key.

    Takes the model bucket and the image repository from the `DataStack`, which deploys first and must be
    filled (artifact uploaded, image pushed) before this stack: SageMaker's CreateModel checks both. Creates
    (retained unless `removal: destroy`) an access-log bucket and a data bucket for data capture and async
    results when an endpoint needs one; then one `ModelEndpoint` per `inference.endpoints` entry and, if
    asked, an `InvokeApi`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        data: DataStack,
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
        self.add_stack_dependency(data)
        self.data = data
        key = network.key
        self.access_logs = access_log_bucket(self, removal_policy=self.removal_policy)
        artifact = config.model.artifact
        self.model_bucket = data.model_bucket
        self.data_bucket = (
            kms_bucket(self, "DataBucket", key=key, access_logs=self.access_logs, removal_policy=self.removal_policy)
            if inference_storage(config).data_bucket
            else None
        )

        self.alarm_topic = self.add_alarm_topic(key, config.alarm_emails)
        image = serving_image(config.model.image, blueprint.env.region, data.repository)
        weights = weights_gib(config.model.parameters_billion, config.model.precision)
        self.endpoints: dict[str, ModelEndpoint] = {}
        for spec in config.endpoints:
            endpoint = ModelEndpoint(
                self,
                spec.construct_id,
                name=spec.name,
                serving=serving_props(spec, config, weights),
                image=image,
                artifact_bucket=self.model_bucket,
                artifact_key=artifact.key,
                artifact_uncompressed=artifact.uncompressed,
                key=key,
                vpc=network.vpc,
                subnets=network.network.private_subnets,
                data_bucket=self.data_bucket,
                environment=config.container_environment(spec),
                network_isolation=config.model.network_isolation,
                alarms=AlarmThresholds(
                    latency_p99_ms=spec.alarms.latency_p99_ms,
                    errors_5xx=spec.alarms.errors_5xx,
                    oldest_request_minutes=spec.alarms.oldest_request_minutes,
                    backlog_without_capacity_minutes=spec.alarms.backlog_without_capacity_minutes,
                ),
                alarm_topic=self.alarm_topic,
            )
            self.endpoints[spec.name] = endpoint
            CfnOutput(self, f"{spec.construct_id}EndpointName", value=endpoint.endpoint_name)
            self._async_outputs(spec.construct_id, endpoint)

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
                max_payload_bytes=PAYLOAD_LIMIT_BYTES[self.endpoints[config.invoke_api.endpoint].serving.mode.name],
            )
            for caller in config.invoke_api.callers:
                self.invoke_api.grant_invoke_url(iam.ArnPrincipal(caller))
            CfnOutput(self, "InvokeUrl", value=self.invoke_api.url_string)
        CfnOutput(self, "ModelArtifact", value=self.model_bucket.s3_url_for_object(artifact.key))

    def _async_outputs(self, construct_id: str, endpoint: ModelEndpoint) -> None:
        """Where an async caller uploads the request (the only prefix the endpoint's role reads), where the
        result and the failure land, and the topics to subscribe to for the notification."""
        serving = endpoint.serving
        if not isinstance(serving, AsyncServing) or endpoint.data_bucket is None:
            return
        bucket = endpoint.data_bucket
        locations = {
            "AsyncInputUri": (serving.input_prefix, "upload requests here (the endpoint reads no other prefix)"),
            "AsyncOutputUri": (serving.output_prefix, "results land here, <OutputLocation> of invoke-endpoint-async"),
            "AsyncFailureUri": (serving.failures, "failed requests' errors land here"),
        }
        for name, (prefix, description) in locations.items():
            CfnOutput(
                self,
                f"{construct_id}{name}",
                value=bucket.s3_url_for_object(f"{prefix}/"),
                description=f"{endpoint.name}: {description}",
            )
        for label, topic in zip(("Success", "Error"), endpoint.topics, strict=True):
            CfnOutput(
                self,
                f"{construct_id}{label}TopicArn",
                value=topic.topic_arn,
                description=f"{endpoint.name}: SNS {label.lower()} notifications (subscribe to get them)",
            )


def _modes(config: InferenceConfig) -> list[str]:
    return sorted({e.mode for e in config.endpoints})
