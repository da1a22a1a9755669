"""Request bodies of pipeline job steps (CreateProcessingJob / CreateTrainingJob / CreateModelPackage), checked offline.

Each builder checks its instance type against the mlstack catalog and the job type SageMaker offers it for, and the
distributed-training rules (EFA types, one subnet, checkpoints for Spot), raising `PipelineDefinitionError` with one
line. Values may be pipeline expressions (`Parameter.ref`, `Step.prop`); a parameter's default is what gets checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlstack.catalog import get_instance
from mlstack.catalog.instances import InstanceType
from mlstack.catalog.sagemaker_jobs import check_instance
from mlstack.constructs.sagemaker.pipeline_definition import Parameter, PipelineDefinitionError
from mlstack.errors import CatalogError

DEFAULT_TRAINING_VOLUME_GB = 50
MAX_RUNTIME_SECONDS = 28 * 24 * 3600
"""`StoppingCondition.MaxRuntimeInSeconds` upper bound for training jobs (28 days)."""
PROCESSING_CODE_DIR = "/opt/ml/processing/input/code"
TRAINING_CODE_DIR = "/opt/ml/input/data/code"
"""Where the `code` channel lands; the SageMaker training toolkit runs `sagemaker_program` from a local
`sagemaker_submit_directory` as well as from an S3 tarball."""

Value = Any
"""A literal or a pipeline expression (`{"Get": ...}`)."""


def _literal(value: Value, parameters: Mapping[str, Parameter]) -> Any:
    """The value a check should look at: a literal, or the default of the parameter it references."""
    if isinstance(value, Mapping) and isinstance(value.get("Get"), str) and value["Get"].startswith("Parameters."):
        param = parameters.get(value["Get"].removeprefix("Parameters."))
        return None if param is None else param.default
    return value


def _require(problem: str | None) -> None:
    if problem is not None:
        raise PipelineDefinitionError(problem)


def processing_cluster(
    instance_type: Value,
    instance_count: Value,
    volume_size_gb: int,
    kms_key_id: Value | None,
    parameters: Mapping[str, Parameter],
) -> dict[str, Any]:
    """`ProcessingResources.ClusterConfig`. A type with local NVMe takes no `VolumeKmsKeyId` (its instance storage is
    encrypted by the instance) and a `VolumeSizeInGB` (required) no larger than that storage (botocore
    `ProcessingClusterConfig`). The rule follows the instance type's default when it is a parameter."""
    it = _instance(instance_type, parameters)
    local = it is not None and it.has_local_nvme
    if it is not None and local and volume_size_gb > it.local_nvme_count * it.local_nvme_gb:
        raise PipelineDefinitionError(
            f"processing volume {volume_size_gb} GB on ml.{it.name}: above its local NVMe "
            f"({it.local_nvme_count} x {it.local_nvme_gb} GB); lower volume_size_gb"
        )
    return {
        "InstanceType": instance_type,
        "InstanceCount": instance_count,
        "VolumeSizeInGB": volume_size_gb,
        **({"VolumeKmsKeyId": kms_key_id} if kms_key_id and not local else {}),
    }


def _instance(instance_type: Value, parameters: Mapping[str, Parameter]) -> InstanceType | None:
    name = _literal(instance_type, parameters)
    if not isinstance(name, str):
        return None
    try:
        return get_instance(name)
    except CatalogError:
        return None


@dataclass(frozen=True)
class JobNetwork:
    """VpcConfig of a job: private subnets and security groups (a training cluster needs one subnet)."""

    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]

    def to_json(self) -> dict[str, Any]:
        return {"Subnets": list(self.subnet_ids), "SecurityGroupIds": list(self.security_group_ids)}


@dataclass(frozen=True)
class ProcessingJob:
    """A script run in a container: `code_uri` (an S3 object) lands in /opt/ml/processing/input/code."""

    image_uri: str
    role_arn: str
    instance_type: Value
    code_uri: Value
    code_file: str
    inputs: Mapping[str, tuple[Value, str]] = field(default_factory=dict)
    """Input name -> (S3 URI, local path under /opt/ml/processing/)."""
    outputs: Mapping[str, tuple[str, Value]] = field(default_factory=dict)
    """Output name -> (local path under /opt/ml/processing/, S3 URI)."""
    instance_count: Value = 1
    arguments: Sequence[Value] = ()
    environment: Mapping[str, Value] = field(default_factory=dict)
    kms_key_id: Value | None = None
    volume_size_gb: int = 30
    max_runtime_seconds: int = 3600
    network: JobNetwork | None = None

    def arguments_json(self, parameters: Mapping[str, Parameter]) -> dict[str, Any]:
        instance = _literal(self.instance_type, parameters)
        if isinstance(instance, str):
            _require(check_instance("processing", instance))
        for local in [*(p for _, p in self.inputs.values()), *(p for p, _ in self.outputs.values())]:
            if not local.startswith("/opt/ml/processing/"):
                raise PipelineDefinitionError(f"processing path {local!r}: must be under /opt/ml/processing/")
        code = {
            "InputName": "code",
            "AppManaged": False,
            "S3Input": _s3_input(self.code_uri, PROCESSING_CODE_DIR),
        }
        body: dict[str, Any] = {
            "ProcessingResources": {
                "ClusterConfig": processing_cluster(
                    self.instance_type, self.instance_count, self.volume_size_gb, self.kms_key_id, parameters
                )
            },
            "AppSpecification": {
                "ImageUri": self.image_uri,
                "ContainerEntrypoint": ["python3", f"{PROCESSING_CODE_DIR}/{self.code_file}"],
                **({"ContainerArguments": list(self.arguments)} if self.arguments else {}),
            },
            "RoleArn": self.role_arn,
            "ProcessingInputs": [
                code,
                *(
                    {"InputName": name, "AppManaged": False, "S3Input": _s3_input(uri, local)}
                    for name, (uri, local) in self.inputs.items()
                ),
            ],
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_runtime_seconds},
        }
        if self.outputs:
            body["ProcessingOutputConfig"] = {
                "Outputs": [
                    {
                        "OutputName": name,
                        "AppManaged": False,
                        "S3Output": {"S3Uri": uri, "LocalPath": local, "S3UploadMode": "EndOfJob"},
                    }
                    for name, (local, uri) in self.outputs.items()
                ],
                **({"KmsKeyId": self.kms_key_id} if self.kms_key_id else {}),
            }
        if self.environment:
            body["Environment"] = dict(self.environment)
        if self.network is not None:
            body["NetworkConfig"] = {"VpcConfig": self.network.to_json(), "EnableNetworkIsolation": False}
        return body


@dataclass(frozen=True)
class TrainingJob:
    """A training job run by the SageMaker training toolkit (`SM_*` variables, `/opt/ml/model`).

    `distribution="torchrun"` asks the PyTorch container to start `torchrun` on every instance; with more than one
    instance the type must support EFA (ml.p4d, ml.p5, ml.trn1: SageMaker attaches EFA on its own) and the job runs
    in one subnet whose security group admits itself (EFA traffic stays inside one group and one AZ).
    Managed Spot needs checkpoints whenever more than one instance would lose its state to an interruption.
    """

    image_uri: str
    role_arn: str
    instance_type: Value
    code_uri: Value
    code_file: str
    channels: Mapping[str, Value]
    """Channel name -> S3 URI (lands in /opt/ml/input/data/<name>, `SM_CHANNEL_<NAME>`)."""
    output_uri: Value
    instance_count: Value = 1
    hyperparameters: Mapping[str, Value] = field(default_factory=dict)
    distribution: Literal["none", "torchrun"] = "none"
    kms_key_id: Value | None = None
    volume_size_gb: int | None = None
    """EBS volume per instance; default 50 GB. None on a type with local NVMe (an error otherwise)."""
    max_runtime_seconds: int = 3600
    network: JobNetwork | None = None
    checkpoint_uri: Value | None = None
    spot: bool = False
    max_wait_seconds: int | None = None

    def arguments_json(self, parameters: Mapping[str, Parameter]) -> dict[str, Any]:
        self._check(parameters)
        hyper = {k: v if isinstance(v, Mapping) else json.dumps(v) for k, v in sorted(self.hyperparameters.items())}
        hyper["sagemaker_program"] = json.dumps(self.code_file)
        hyper["sagemaker_submit_directory"] = json.dumps(TRAINING_CODE_DIR)
        if self.distribution == "torchrun":
            hyper["sagemaker_torch_distributed_enabled"] = json.dumps(True)
        channels = {"code": self.code_uri, **self.channels}
        body: dict[str, Any] = {
            "AlgorithmSpecification": {"TrainingImage": self.image_uri, "TrainingInputMode": "File"},
            "RoleArn": self.role_arn,
            "HyperParameters": hyper,
            "InputDataConfig": [
                {"ChannelName": name, "DataSource": {"S3DataSource": _s3_source(uri)}} for name, uri in channels.items()
            ],
            "OutputDataConfig": {
                "S3OutputPath": self.output_uri,
                **({"KmsKeyId": self.kms_key_id} if self.kms_key_id else {}),
            },
            "ResourceConfig": self._resources(parameters),
            "StoppingCondition": {
                "MaxRuntimeInSeconds": self.max_runtime_seconds,
                **({"MaxWaitTimeInSeconds": self.max_wait_seconds} if self.spot else {}),
            },
        }
        if self.network is not None:
            body["VpcConfig"] = self.network.to_json()
        if self.checkpoint_uri is not None:
            body["CheckpointConfig"] = {"S3Uri": self.checkpoint_uri, "LocalPath": "/opt/ml/checkpoints"}
        if self.spot:
            body["EnableManagedSpotTraining"] = True
        return body

    def _resources(self, parameters: Mapping[str, Parameter]) -> dict[str, Any]:
        """A type with local NVMe gets neither a volume key nor a volume size: SageMaker uses the instance storage
        (encrypted by the instance) and rejects `VolumeKmsKeyId` there (botocore `ResourceConfig`)."""
        it = _instance(self.instance_type, parameters)
        body: dict[str, Any] = {"InstanceType": self.instance_type, "InstanceCount": self.instance_count}
        if it is not None and it.has_local_nvme:
            if self.volume_size_gb is not None:
                raise PipelineDefinitionError(
                    f"training volume_size_gb on ml.{it.name}: it has local NVMe ({it.local_nvme_count} x "
                    f"{it.local_nvme_gb} GB) that SageMaker uses instead of an EBS volume; remove volume_size_gb"
                )
            return body
        body["VolumeSizeInGB"] = DEFAULT_TRAINING_VOLUME_GB if self.volume_size_gb is None else self.volume_size_gb
        if self.kms_key_id:
            body["VolumeKmsKeyId"] = self.kms_key_id
        return body

    def _check(self, parameters: Mapping[str, Parameter]) -> None:
        instance = _literal(self.instance_type, parameters)
        count = _literal(self.instance_count, parameters)
        if isinstance(instance, str):
            _require(check_instance("training", instance))
        if not 1 <= self.max_runtime_seconds <= MAX_RUNTIME_SECONDS:
            raise PipelineDefinitionError(
                f"training max runtime {self.max_runtime_seconds}s: must be 1..{MAX_RUNTIME_SECONDS} (28 days)"
            )
        multi = not isinstance(count, int) or count > 1
        if multi and isinstance(instance, str) and self.distribution == "torchrun":
            it = get_instance(instance)
            if not it.efa_supported:
                raise PipelineDefinitionError(
                    f"training instance {instance!r}: multi-instance torchrun needs an EFA type "
                    "(ml.p4d.24xlarge, ml.p5.48xlarge, ml.trn1.32xlarge); use one instance or an EFA type"
                )
            if self.network is None or len(self.network.subnet_ids) != 1:
                raise PipelineDefinitionError(
                    f"training on {count} x {instance}: EFA training runs in one subnet (one AZ); give exactly one"
                )
        if self.spot:
            if multi and self.checkpoint_uri is None:
                raise PipelineDefinitionError(
                    "training with managed Spot on more than one instance needs checkpoint_uri: an interruption "
                    "otherwise restarts the whole run"
                )
            if self.max_wait_seconds is None or self.max_wait_seconds < self.max_runtime_seconds:
                raise PipelineDefinitionError(
                    f"training with managed Spot: max_wait_seconds ({self.max_wait_seconds}) must be at least "
                    f"max_runtime_seconds ({self.max_runtime_seconds})"
                )
        elif self.max_wait_seconds is not None:
            raise PipelineDefinitionError("training: max_wait_seconds is for managed Spot only; set spot or drop it")


@dataclass(frozen=True)
class ModelPackage:
    """CreateModelPackage into a group, pending manual approval; baselines travel with the version."""

    group_name: Value
    image_uri: str
    model_data_url: Value
    content_types: Sequence[str] = ("text/csv",)
    inference_instance_types: Sequence[str] = ()
    metrics_uri: Value | None = None
    """The evaluation report (ModelMetrics.ModelQuality.Statistics)."""
    baseline_constraints_uri: Value | None = None
    baseline_statistics_uri: Value | None = None
    description: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)

    def arguments_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ModelPackageGroupName": self.group_name,
            "ModelApprovalStatus": "PendingManualApproval",
            "InferenceSpecification": {
                "Containers": [
                    {
                        "Image": self.image_uri,
                        "ModelDataUrl": self.model_data_url,
                        **({"Environment": dict(self.environment)} if self.environment else {}),
                    }
                ],
                "SupportedContentTypes": list(self.content_types),
                "SupportedResponseMIMETypes": list(self.content_types),
                **(
                    {"SupportedRealtimeInferenceInstanceTypes": list(self.inference_instance_types)}
                    if self.inference_instance_types
                    else {}
                ),
            },
        }
        if self.description:
            body["ModelPackageDescription"] = self.description
        if self.metrics_uri is not None:
            body["ModelMetrics"] = {
                "ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": self.metrics_uri}}
            }
        if self.baseline_constraints_uri is not None and self.baseline_statistics_uri is not None:
            body["DriftCheckBaselines"] = {
                "ModelDataQuality": {
                    "Constraints": {"ContentType": "application/json", "S3Uri": self.baseline_constraints_uri},
                    "Statistics": {"ContentType": "application/json", "S3Uri": self.baseline_statistics_uri},
                }
            }
        return body


def _s3_input(uri: Value, local: str) -> dict[str, Any]:
    return {"S3Uri": uri, "LocalPath": local, "S3DataType": "S3Prefix", "S3InputMode": "File"}


def _s3_source(uri: Value) -> dict[str, Any]:
    return {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
