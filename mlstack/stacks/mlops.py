"""`MlopsStack`: artifacts bucket, model registry, SageMaker pipeline, approval-to-deploy, monitoring, Studio."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack import resources
from mlstack.config import BlueprintConfig
from mlstack.config.mlops import SCHEDULES, MlopsConfig
from mlstack.constructs.sagemaker import ApprovalDeploy, MlopsPipeline, StudioDomain, TrainingSettings
from mlstack.constructs.storage.buckets import access_log_bucket, kms_bucket
from mlstack.design.mlops import MLOPS_SERVING_ENVIRONMENT, mlops_names
from mlstack.stacks.base import MlStack
from mlstack.stacks.images import serving_image as image_of
from mlstack.stacks.network import NetworkStack

__all__ = ["MlopsStack"]


class MlopsStack(MlStack):
    """Everything the model lifecycle needs, in the NetworkStack's private subnets, encrypted with its key.

    Stateful (retained unless `removal: destroy`): the access-log bucket, the artifacts bucket (runs, captured
    requests, monitoring reports), the model package group (the registry) and the Studio domain. The endpoint is
    not a resource of this stack: the deploy function creates it on the first approval (see `ApprovalDeploy`).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, network: NetworkStack, **kwargs: Any
    ) -> None:
        config = blueprint.mlops
        if config is None:
            raise ValueError("MlopsStack needs a blueprint with an `mlops:` section")
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: SageMaker pipeline, model registry, approval-to-deploy",
            **kwargs,
        )
        self.add_stack_dependency(network)
        key = network.key
        subnets = network.network.private_subnets
        self.alarm_topic = self.add_alarm_topic(key, config.alarm_emails)
        self.access_logs = access_log_bucket(self, removal_policy=self.removal_policy)
        self.artifacts = kms_bucket(
            self, "ArtifactsBucket", key=key, access_logs=self.access_logs, removal_policy=self.removal_policy
        )
        names = mlops_names(blueprint.name)
        group_name = names.model_package_group
        self.model_package_group = sagemaker.CfnModelPackageGroup(
            self,
            "ModelPackageGroup",
            model_package_group_name=group_name,
            model_package_group_description=f"mlstack {blueprint.name}: versions registered by the pipeline",
        )
        # The registry holds every version and its approval history: keep it like data.
        self.model_package_group.apply_removal_policy(self.removal_policy)
        training_image = image_of(config.images.training, blueprint.env.region)
        processing_image = image_of(config.images.processing, blueprint.env.region)
        monitor_image = image_of(config.monitoring.image, blueprint.env.region)
        serving_image = image_of(config.images.serving or config.images.training, blueprint.env.region)
        pipeline = config.pipeline
        self.pipeline = MlopsPipeline(
            self,
            "Pipeline",
            artifacts_bucket=self.artifacts,
            key=key,
            model_package_group_name=group_name,
            pipeline_name=names.pipeline,
            training_image=training_image.uri,
            processing_image=processing_image.uri,
            monitor_image=monitor_image.uri,
            serving_image=serving_image.uri,
            vpc=network.vpc,
            subnets=subnets,
            training=_training(config),
            processing_instance_type=pipeline.processing_instance_type,
            accuracy_threshold=pipeline.accuracy_threshold,
            serving_instance_types=[config.serving.instance_type],
            input_prefix=pipeline.input_prefix,
            serving_environment=MLOPS_SERVING_ENVIRONMENT,
            scripts_dir=resources.runtime_path("mlops"),
            alarm_topic=self.alarm_topic,
        )
        self.pipeline.node.add_dependency(self.model_package_group)
        for image in {training_image, processing_image, monitor_image}:
            image.grant_pull(self.pipeline.job_role)
        self.deploy = ApprovalDeploy(
            self,
            "ApprovalDeploy",
            model_package_group_name=group_name,
            endpoint_name=names.endpoint,
            artifacts_bucket=self.artifacts,
            key=key,
            vpc=network.vpc,
            subnets=subnets,
            instance_type=config.serving.instance_type,
            instance_count=config.serving.instance_count,
            volume_key=config.serving.volume_key,
            capture_percent=config.serving.capture_percent,
            monitor_image=monitor_image.uri,
            monitor_instance_type=config.monitoring.instance_type,
            monitor_volume_key=config.monitoring.volume_key,
            monitor_schedule=SCHEDULES[config.monitoring.schedule],
            removal_policy=self.removal_policy,
            alarm_topic=self.alarm_topic,
        )
        serving_image.grant_pull(self.deploy.model_role)
        monitor_image.grant_pull(self.deploy.monitor_role)
        self.studio: StudioDomain | None = None
        if config.studio is not None:
            self.studio = StudioDomain(
                self,
                "Studio",
                domain_name=names.studio_domain,
                vpc=network.vpc,
                subnets=subnets,
                key=key,
                artifacts_bucket=self.artifacts,
                pipeline_name=self.pipeline.pipeline_name,
                user_names=config.studio.users,
                model_package_group_name=group_name,
                removal_policy=self.removal_policy,
            )
        CfnOutput(self, "PipelineName", value=self.pipeline.pipeline_name)
        CfnOutput(self, "ModelPackageGroupName", value=group_name)
        CfnOutput(self, "EndpointName", value=self.deploy.endpoint_name)
        CfnOutput(self, "ArtifactsBucketName", value=self.artifacts.bucket_name)
        # Where each approval's decision is logged (one JSON line per event: deployed, deferred, rolled back, failed).
        CfnOutput(self, "DeployLogGroupName", value=self.deploy.log_group.log_group_name)


def _training(config: MlopsConfig) -> TrainingSettings:
    step = config.pipeline.training
    return TrainingSettings(
        instance_type=step.instance_type,
        instance_count=step.instance_count,
        distribution=step.distribution,
        spot=step.spot,
        max_runtime_seconds=round(step.max_runtime_hours * 3600),
        max_wait_seconds=None if step.max_wait_hours is None else round(step.max_wait_hours * 3600),
        checkpoints=step.checkpoints,
        volume_size_gb=step.volume_size_gb,
        hyperparameters=tuple(sorted(step.hyperparameters.items())),
    )
