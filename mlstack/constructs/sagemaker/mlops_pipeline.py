"""`MlopsPipeline`: preprocess -> train -> evaluate + baseline -> condition on accuracy -> register (pending approval).

The scripts ship as CDK file assets: `cdk deploy` uploads them to the bootstrap asset bucket before it creates or
updates this stack, so they are in S3 before the pipeline exists and before any run starts (CreatePipeline itself
reads no S3 object). Two roles: the pipeline role starts jobs, registers the model and passes the job role; the job
role reads inputs and code, writes this pipeline's run prefix, logs and metrics, and places ENIs in the VPC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack import resources
from mlstack.constructs.sagemaker.jobs import JobNetwork, ModelPackage, ProcessingJob, TrainingJob, processing_cluster
from mlstack.constructs.sagemaker.pipeline_definition import (
    Condition,
    ConditionStep,
    Parameter,
    PipelineDefinition,
    PropertyFile,
    Step,
)
from mlstack.constructs.sagemaker.pipeline_grants import RUNS_PREFIX, grant_job_role, grant_pipeline_role
from mlstack.constructs.security.groups import closed_security_group

EXAMPLE_SCRIPTS = resources.runtime_path("mlops")
"""`runtime/mlops/`: the example preprocess/train/evaluate scripts (standard library only, tested on CPU)."""
SERVING_ENVIRONMENT = {
    "SAGEMAKER_PROGRAM": "inference.py",
    "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/model/code",
    "SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT": "text/csv",
}
"""How the framework serving containers find the handler the example train.py puts into the model (code/), and
the response type of a request without an Accept header: CSV, one prediction per line, so the captured responses
have the layout of the CSV baseline (the containers answer JSON otherwise; SageMaker inference toolkit,
`SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT`)."""
BASELINE_FORMAT = '{"csv": {"header": true, "output_columns_position": "START"}}'
"""The baseline file evaluate.py writes has a header and the model's output first, then the features: the layout of
the endpoint's captured CSV (output then input), which the monitoring job compares with this baseline."""


@dataclass(frozen=True)
class TrainingSettings:
    """The training step. Defaults: one ml.m7i.xlarge, no Spot, one hour."""

    instance_type: str = "ml.m7i.xlarge"
    instance_count: int = 1
    distribution: Literal["none", "torchrun"] = "none"
    spot: bool = False
    max_runtime_seconds: int = 3600
    max_wait_seconds: int | None = None
    checkpoints: bool = False
    volume_size_gb: int | None = None
    """Default 50 GB; leave None on a type with local NVMe (SageMaker uses the instance storage)."""
    hyperparameters: tuple[tuple[str, str], ...] = (("epochs", "100"),)


class MlopsPipeline(Construct):
    """A SageMaker pipeline (`AWS::SageMaker::Pipeline`) whose definition is built and validated in code.

    Props (keyword): `artifacts_bucket`/`key` (runs and model artifacts, KMS-encrypted), `model_package_group_name`,
    `pipeline_name`, container images (`training_image`, `processing_image`, `monitor_image`: the Model Monitor
    analyzer that writes the data-quality baseline), `vpc`/`subnets` (jobs run there; training in `subnets[0]`
    only when it uses torchrun on several instances), `training` (default `TrainingSettings()`),
    `processing_instance_type` (default ml.m7i.xlarge), `accuracy_threshold` (default 0.8),
    `serving_instance_types` (what the registered version may be deployed on), `serving_image` (default the
    training image) and `serving_environment` (default: run code/inference.py from the model), `scripts_dir`
    (default the example scripts), `input_prefix` (default None: the preprocess script generates a synthetic data set),
    `alarm_topic` (default None: a failed execution notifies no one; given, an EventBridge rule publishes each
    failed execution of this pipeline to it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        artifacts_bucket: s3.IBucket,
        key: kms.IKey,
        model_package_group_name: str,
        pipeline_name: str,
        training_image: str,
        processing_image: str,
        monitor_image: str,
        vpc: ec2.IVpc,
        serving_image: str | None = None,
        serving_environment: Mapping[str, str] = SERVING_ENVIRONMENT,
        subnets: Sequence[ec2.ISubnet],
        training: TrainingSettings = TrainingSettings(),
        processing_instance_type: str = "ml.m7i.xlarge",
        accuracy_threshold: float = 0.8,
        serving_instance_types: Sequence[str] = (),
        scripts_dir: Path = EXAMPLE_SCRIPTS,
        input_prefix: str | None = None,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.security_group = closed_security_group(
            self,
            "JobSecurityGroup",
            vpc=vpc,
            description=f"{pipeline_name} jobs: instances of one training job talk to each other (EFA, NCCL)",
        )
        # EFA and NCCL traffic must be allowed to and from the group itself (all protocols), and S3 over HTTPS.
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "instances of one job")
        self.security_group.add_egress_rule(self.security_group, ec2.Port.all_traffic(), "instances of one job")
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "S3 and AWS APIs over HTTPS")
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{pipeline_name} processing and training jobs",
        )
        self.role = iam.Role(
            self,
            "PipelineRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{pipeline_name}: start its jobs, register models in {model_package_group_name}",
        )
        self.code = {
            name: s3_assets.Asset(self, f"{name.capitalize()}Code", path=str(scripts_dir / f"{name}.py"))
            for name in ("preprocess", "train", "evaluate")
        }
        grant_job_role(
            self.job_role,
            bucket=artifacts_bucket,
            key=key,
            code=list(self.code.values()),
            input_prefix=input_prefix,
            vpc=vpc,
        )
        grant_pipeline_role(
            self.role, job_role=self.job_role, group=model_package_group_name, bucket=artifacts_bucket, key=key
        )

        self.definition = self._definition(
            bucket=artifacts_bucket.bucket_name,
            key_arn=key.key_arn,
            group=model_package_group_name,
            images=(training_image, processing_image, monitor_image),
            serving=(serving_image or training_image, serving_environment),
            network=JobNetwork([s.subnet_id for s in subnets], [self.security_group.security_group_id]),
            training=training,
            processing_instance_type=processing_instance_type,
            accuracy_threshold=accuracy_threshold,
            serving_instance_types=serving_instance_types,
            input_prefix=input_prefix,
        )
        self.pipeline = sagemaker.CfnPipeline(
            self,
            "Pipeline",
            pipeline_name=pipeline_name,
            role_arn=self.role.role_arn,
            # Passed through untransformed: the key must be PascalCase (aws-cdk issue #25774).
            pipeline_definition={"PipelineDefinitionBody": stack.to_json_string(self.definition.to_json())},
            pipeline_description=f"preprocess, train, evaluate, register into {model_package_group_name}",
        )
        self.pipeline.node.add_dependency(self.role, self.job_role)
        self.pipeline_name = pipeline_name
        self.failed_rule: events.Rule | None = None
        if alarm_topic is not None:
            # SageMaker sends "SageMaker Model Building Pipeline Execution Status Change" to the default bus (SageMaker
            # Developer Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge").
            pipeline_arn = stack.format_arn(
                service="sagemaker", resource="pipeline", resource_name=pipeline_name.lower()
            )
            self.failed_rule = events.Rule(
                self,
                "FailedExecutionRule",
                description=f"an execution of {pipeline_name} failed",
                event_pattern=events.EventPattern(
                    source=["aws.sagemaker"],
                    detail_type=["SageMaker Model Building Pipeline Execution Status Change"],
                    detail={"pipelineArn": [pipeline_arn], "currentPipelineExecutionStatus": ["Failed"]},
                ),
                targets=[targets.SnsTopic(alarm_topic)],
            )

    def _definition(
        self,
        *,
        bucket: str,
        key_arn: str,
        group: str,
        images: tuple[str, str, str],
        serving: tuple[str, Mapping[str, str]],
        network: JobNetwork,
        training: TrainingSettings,
        processing_instance_type: str,
        accuracy_threshold: float,
        serving_instance_types: Sequence[str],
        input_prefix: str | None,
    ) -> PipelineDefinition:
        training_image, processing_image, monitor_image = images
        params = [
            Parameter("ProcessingInstanceType", "String", processing_instance_type),
            Parameter("TrainingInstanceType", "String", training.instance_type),
            Parameter("TrainingInstanceCount", "Integer", training.instance_count),
            Parameter("AccuracyThreshold", "Float", accuracy_threshold),
        ]
        by_name = {p.name: p for p in params}
        run = f"s3://{bucket}/{RUNS_PREFIX}"

        def uri(*parts: str) -> dict[str, object]:
            return {"Std:Join": {"On": "/", "Values": [run, {"Get": "Execution.PipelineExecutionId"}, *parts]}}

        role = self.job_role.role_arn
        base = "/opt/ml/processing"
        splits = ("train", "validation", "test")
        preprocess = Step(
            "Preprocess",
            "Processing",
            ProcessingJob(
                image_uri=processing_image,
                role_arn=role,
                instance_type=by_name["ProcessingInstanceType"].ref,
                code_uri=self.code["preprocess"].s3_object_url,
                code_file=self.code["preprocess"].s3_object_key,
                inputs={"data": (f"s3://{bucket}/{input_prefix}", f"{base}/input/data")} if input_prefix else {},
                outputs={s: (f"{base}/{s}", uri("preprocess", s)) for s in splits},
                kms_key_id=key_arn,
                network=network,
            ).arguments_json(by_name),
        )
        train = Step(
            "Train",
            "Training",
            TrainingJob(
                image_uri=training_image,
                role_arn=role,
                instance_type=by_name["TrainingInstanceType"].ref,
                instance_count=by_name["TrainingInstanceCount"].ref
                if training.distribution == "torchrun"
                else training.instance_count,
                code_uri=self.code["train"].s3_object_url,
                code_file=self.code["train"].s3_object_key,
                channels={"train": preprocess.output_uri("train"), "validation": preprocess.output_uri("validation")},
                output_uri=uri("model"),
                hyperparameters=dict(training.hyperparameters),
                distribution=training.distribution,
                kms_key_id=key_arn,
                volume_size_gb=training.volume_size_gb,
                max_runtime_seconds=training.max_runtime_seconds,
                network=JobNetwork(network.subnet_ids[:1], network.security_group_ids)
                if training.distribution == "torchrun"
                else network,
                checkpoint_uri=uri("checkpoints") if training.checkpoints else None,
                spot=training.spot,
                max_wait_seconds=training.max_wait_seconds,
            ).arguments_json(by_name),
        )
        evaluate = Step(
            "Evaluate",
            "Processing",
            ProcessingJob(
                image_uri=processing_image,
                role_arn=role,
                instance_type=by_name["ProcessingInstanceType"].ref,
                code_uri=self.code["evaluate"].s3_object_url,
                code_file=self.code["evaluate"].s3_object_key,
                inputs={
                    "model": (train.prop("ModelArtifacts.S3ModelArtifacts"), f"{base}/model"),
                    "test": (preprocess.output_uri("test"), f"{base}/test"),
                    "train": (preprocess.output_uri("train"), f"{base}/train"),
                },
                outputs={
                    "evaluation": (f"{base}/evaluation", uri("evaluation")),
                    "baseline": (f"{base}/baseline", uri("baseline-data")),
                },
                kms_key_id=key_arn,
                network=network,
            ).arguments_json(by_name),
            property_files=[PropertyFile("Evaluation", "evaluation", "evaluation.json")],
        )
        baseline = Step(
            "Baseline",
            "Processing",
            self._baseline(monitor_image, evaluate, uri("baseline"), key_arn, network, by_name),
        )
        register = Step(
            "Register",
            "RegisterModel",
            ModelPackage(
                group_name=group,
                image_uri=serving[0],
                environment=serving[1],
                model_data_url=train.prop("ModelArtifacts.S3ModelArtifacts"),
                inference_instance_types=serving_instance_types,
                metrics_uri=_join(evaluate.output_uri("evaluation"), "evaluation.json"),
                baseline_constraints_uri=_join(baseline.output_uri("baseline"), "constraints.json"),
                baseline_statistics_uri=_join(baseline.output_uri("baseline"), "statistics.json"),
                description="registered by the pipeline when accuracy met the threshold",
            ).arguments_json(),
        )
        check = ConditionStep(
            "CheckAccuracy",
            conditions=[
                Condition(
                    "GreaterThanOrEqualTo",
                    evaluate.json_get("Evaluation", "metrics.accuracy.value"),
                    by_name["AccuracyThreshold"].ref,
                )
            ],
            if_steps=[register],
        )
        return PipelineDefinition(parameters=params, steps=[preprocess, train, evaluate, baseline, check])

    def _baseline(
        self,
        image: str,
        evaluate: Step,
        output_uri: object,
        key_arn: str,
        network: JobNetwork,
        parameters: Mapping[str, Parameter],
    ) -> dict[str, object]:
        """The Model Monitor analyzer over the model's output and the training features (evaluate.py writes them in
        the captured data's layout): constraints.json and statistics.json."""
        local_in = "/opt/ml/processing/input/baseline_dataset_input"
        instance = parameters["ProcessingInstanceType"].ref
        return {
            "ProcessingResources": {"ClusterConfig": processing_cluster(instance, 1, 30, key_arn, parameters)},
            "AppSpecification": {"ImageUri": image},
            "RoleArn": self.job_role.role_arn,
            "Environment": {
                "dataset_format": BASELINE_FORMAT,
                "dataset_source": local_in,
                "output_path": "/opt/ml/processing/output",
                "publish_cloudwatch_metrics": "Disabled",
            },
            "ProcessingInputs": [
                {
                    "InputName": "baseline_dataset_input",
                    "AppManaged": False,
                    "S3Input": {
                        "S3Uri": evaluate.output_uri("baseline"),
                        "LocalPath": local_in,
                        "S3DataType": "S3Prefix",
                        "S3InputMode": "File",
                    },
                }
            ],
            "ProcessingOutputConfig": {
                "Outputs": [
                    {
                        "OutputName": "baseline",
                        "AppManaged": False,
                        "S3Output": {
                            "S3Uri": output_uri,
                            "LocalPath": "/opt/ml/processing/output",
                            "S3UploadMode": "EndOfJob",
                        },
                    }
                ],
                "KmsKeyId": key_arn,
            },
            "NetworkConfig": {"VpcConfig": network.to_json(), "EnableNetworkIsolation": False},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        }


def _join(*values: object) -> dict[str, object]:
    return {"Std:Join": {"On": "/", "Values": list(values)}}
