"""The `inference:` section of a blueprint (InferenceStack): one model, its endpoints, and the traffic they serve.

Domain rules checked here, each with a message that names the fix (limits: SageMaker endpoint quotas and the
SageMaker Developer Guide's real-time, serverless and asynchronous inference pages):
- a variant's instance type must be in the catalog and offered for SageMaker hosting;
- serverless memory is one of 1024..6144 MB in 1024 steps, concurrency 1-200, provisioned <= max;
- autoscaling min <= max; real-time variants cannot scale to zero (only endpoints with inference components can);
- a KMS volume key cannot be asked for when a variant's host has local NVMe (SageMaker rejects KmsKeyId there);
- an async endpoint needs an output path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import get_instance
from mlstack.catalog.dlc_registries import dlc_account
from mlstack.catalog.endpoint_modes import MODES, endpoint_mode
from mlstack.config.base import StrictModel, email_addresses, pascal_id
from mlstack.config.inference_fit import host_memory_problem, neuron_options_problem, weights_gib
from mlstack.config.inference_image import (
    dlc_account_problem,
    gpu_ami_for,
    gpu_ami_problem,
    image_cuda,
    is_nvidia_host,
)
from mlstack.config.network import NetworkConfig
from mlstack.errors import CatalogError

SERVERLESS_MEMORY_MB = (1024, 2048, 3072, 4096, 5120, 6144)
"""`ServerlessConfig.MemorySizeInMB` values SageMaker accepts (botocore sagemaker model)."""

InferenceAmiVersion = Literal[
    "al2-ami-sagemaker-inference-gpu-2",
    "al2-ami-sagemaker-inference-gpu-2-1",
    "al2-ami-sagemaker-inference-gpu-3-1",
    "al2-ami-sagemaker-inference-neuron-2",
    "al2023-ami-sagemaker-inference-gpu-4-1",
]
"""`ProductionVariant.InferenceAmiVersion` values (botocore sagemaker model)."""
NEURON_AMI: InferenceAmiVersion = "al2-ami-sagemaker-inference-neuron-2"
"""The Neuron host AMI: Inferentia2 and Trainium only (botocore documents no inf1 support; inf1 keeps the default)."""

_NAME = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
_STACK_IDS = frozenset(
    {"AccessLogs", "DataBucket", "InvokeApi", "InvokeUrl", "ModelArtifact", "AlarmTopic", "AlarmTopicArn"}
)
"""Construct IDs the InferenceStack gives its own resources and outputs; no endpoint may take one."""
_VARIANT = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
_S3_KEY = r"^[A-Za-z0-9!_.*'()/-]+$"
_PREFIX = r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$"


class ArtifactConfig(StrictModel):
    """Where `model.tar.gz` is: in the bucket the stack creates (default) or in an existing bucket."""

    key: str = Field(min_length=1, max_length=1024, pattern=_S3_KEY)
    """Object key of the artifact, e.g. `llama-3-8b/model.tar.gz`. The execution role may read this object only."""
    existing_bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """Name of a bucket that already holds the artifact. Default: the DataStack creates a bucket (project KMS key,
    TLS only, versioned, access-logged, retained) and you upload the artifact there before deploying the
    InferenceStack."""
    existing_bucket_key_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/.+$")
    """KMS key of the existing bucket, if it is SSE-KMS encrypted (the role gets kms:Decrypt on it)."""
    uncompressed: bool = False
    """`key` is a prefix (ending in `/`) holding the model files as they are, not a `model.tar.gz`: SageMaker copies
    them to /opt/ml/model without unpacking (ModelDataSource S3Prefix, CompressionType None). For multi-GB weights
    this skips the archive step on every host start. The execution role may list and read that prefix only."""

    @model_validator(mode="after")
    def _key_only_with_bucket(self) -> ArtifactConfig:
        if self.existing_bucket_key_arn and not self.existing_bucket:
            raise ValueError(
                "existing_bucket_key_arn is only for an existing_bucket; the stack's own bucket uses the project key"
            )
        if self.uncompressed and not self.key.endswith("/"):
            raise ValueError(
                f"artifact.uncompressed: key {self.key!r} must be a prefix ending in '/' (SageMaker copies every "
                "object under it), e.g. llama-3-8b/"
            )
        if not self.uncompressed and self.key.endswith("/"):
            raise ValueError(
                f"artifact.key {self.key!r} is a prefix: set uncompressed: true for model files under it, or name "
                "the model.tar.gz object"
            )
        return self


class EcrImage(StrictModel):
    """A serving image in a repository of this account (your own build, e.g. OpenVINO Model Server)."""

    source: Literal["ecr"]
    repository: str = Field(pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    create_repository: bool = True
    """The DataStack creates the repository (project key, scan on push, immutable tags, retained); push the
    image there before deploying the InferenceStack. `false`: the repository already exists in this account."""


class DlcImage(StrictModel):
    """An AWS Deep Learning Container (or any image in another account's ECR that grants SageMaker pulls)."""

    source: Literal["dlc"]
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    """The registry account. Default: the AWS DLC registry of the registry region, from the catalog table
    (763104351884 in most commercial regions; the opt-in regions and China have their own). Set it for an image
    in another account's registry."""
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    """Registry region, e.g. us-east-1. Default: the blueprint's region (DLC registries are regional)."""
    repository: str = Field(pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

    def registry_account(self, region: str) -> str | None:
        """`account`, or the DLC registry of the registry region (`region` is the blueprint's) from the catalog."""
        return self.account or dlc_account(self.region or region)


ImageConfig = Annotated[EcrImage | DlcImage, Field(discriminator="source")]


MODEL_ID_VARIABLES = ("HF_MODEL_ID", "OPTION_MODEL_ID", "MODEL_ID")
"""Serving-container variables naming the model to load: a hub ID or URL is downloaded at start-up (TGI,
HuggingFace and LMI containers); a path under /opt/ml/model is the artifact SageMaker mounted."""


class InferenceModelConfig(StrictModel):
    """The served model: artifact, serving image, and its size for the plan."""

    artifact: ArtifactConfig
    image: ImageConfig
    parameters_billion: float = Field(gt=0, le=10_000)
    """Model size in billions of parameters (for the plan's memory check; the stack does not use it)."""
    precision: Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"] = "bf16"
    """Precision of the served weights (for the plan's memory check)."""
    network_isolation: bool = True
    """Run the container with no network access (real-time and async; serverless endpoints have none to
    isolate): it gets the artifact SageMaker downloads to /opt/ml/model and nothing else. Turn it off only for
    a container that must reach the network itself (a hub download, a feature store)."""
    environment: dict[str, str] = Field(default_factory=dict, max_length=100)
    """Container environment (e.g. HF_MODEL_ID, OPTION_TENSOR_PARALLEL_DEGREE). No secrets: it is in the template.
    SageMaker takes at most 100 variables, names `[a-zA-Z_][a-zA-Z0-9_]*`, names and values up to 1024 characters."""

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in value if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,1023}", k))
        if bad:
            raise ValueError(
                f"environment variable name(s) {', '.join(map(repr, bad))} are not valid for SageMaker; use letters, "
                "digits and underscores, not starting with a digit (e.g. OPTION_TENSOR_PARALLEL_DEGREE)"
            )
        long = sorted(k for k, v in value.items() if len(v) > 1024)
        if long:
            raise ValueError(f"environment value(s) of {', '.join(long)} exceed SageMaker's 1024 characters")
        return value

    @model_validator(mode="after")
    def _isolated_model_is_local(self) -> InferenceModelConfig:
        if not self.network_isolation:
            return self
        for name in MODEL_ID_VARIABLES:
            value = self.environment.get(name)
            if value is not None and not value.startswith("/"):
                raise ValueError(
                    f"environment {name}={value!r} makes the container download the model, but network_isolation "
                    "is on (no network in the container): put the weights in the artifact and set "
                    f"{name}=/opt/ml/model, or set network_isolation: false"
                )
        return self


class TrafficConfig(StrictModel):
    """Assumptions for `mlstack plan`: what the endpoint serves and what one instance can do."""

    requests_per_second: float = Field(gt=0)
    """Average request rate over a month."""
    throughput_per_instance: float | None = Field(default=None, gt=0)
    """Requests per second one instance sustains at the target latency (measure it: load-test your model)."""
    average_duration_ms: float | None = Field(default=None, gt=0)
    """Average time per request (serverless compute and async backlog estimates)."""


class _ScalingBase(StrictModel):
    min_instances: int = Field(ge=0, le=1000)
    max_instances: int = Field(ge=1, le=1000)
    scale_in_cooldown_seconds: int = Field(default=300, ge=0, le=3600)
    scale_out_cooldown_seconds: int = Field(default=60, ge=0, le=3600)

    @model_validator(mode="after")
    def _min_max(self) -> Self:
        if self.min_instances > self.max_instances:
            raise ValueError(
                f"autoscaling min_instances ({self.min_instances}) exceeds max_instances ({self.max_instances}); "
                "raise max_instances or lower min_instances"
            )
        return self


class RealtimeScalingConfig(_ScalingBase):
    """Target tracking on invocations per instance (default) or on concurrent requests per model."""

    metric: Literal["invocations", "concurrent_requests"] = "invocations"
    """`invocations`: `SageMakerVariantInvocationsPerInstance` (per minute). `concurrent_requests`:
    `SageMakerVariantConcurrentRequestsPerModelHighResolution`, the requests in flight per model copy, published
    every 10 s: an LLM's load follows requests in flight (long generations), and the high-resolution metric scales
    out in well under a minute ("Faster auto scaling for generative AI models", SageMaker guide)."""
    target_invocations_per_instance: float | None = Field(default=None, gt=0)
    """`invocations`: invocations per instance per minute to hold (load-test: ~ throughput x 60 x 0.5 leaves
    headroom)."""
    target_concurrent_requests_per_model: float | None = Field(default=None, gt=0)
    """`concurrent_requests`: requests in flight per model copy to hold (e.g. the container's max batch size)."""

    @model_validator(mode="after")
    def _target_of_metric(self) -> RealtimeScalingConfig:
        wanted, other = (
            ("target_invocations_per_instance", "target_concurrent_requests_per_model")
            if self.metric == "invocations"
            else ("target_concurrent_requests_per_model", "target_invocations_per_instance")
        )
        if getattr(self, other) is not None:
            raise ValueError(f"autoscaling metric {self.metric} takes {wanted}, not {other}; set {wanted} only")
        if getattr(self, wanted) is None:
            raise ValueError(f"autoscaling metric {self.metric} needs {wanted}")
        return self

    @property
    def target_value(self) -> float:
        value = (
            self.target_invocations_per_instance
            if self.metric == "invocations"
            else self.target_concurrent_requests_per_model
        )
        assert value is not None
        return value


def _check_hosting_type(value: str) -> str:
    if not value.startswith("ml."):
        raise ValueError(f"SageMaker instance types start with 'ml.', e.g. 'ml.{value}'")
    try:
        instance = get_instance(value)
    except CatalogError as err:
        raise ValueError(str(err)) from None
    if not instance.sagemaker_hosting:
        raise ValueError(
            f"{value} is not offered for SageMaker hosting (real-time/async endpoints); "
            "pick a hosting type from `mlstack catalog`"
        )
    return value


def _check_ami(instance_type: str, ami: str | None) -> None:
    """An InferenceAmiVersion carries a driver for one kind of accelerator: NVIDIA GPUs or Inferentia2/Trainium."""
    if ami is None:
        return
    accelerator = get_instance(instance_type).accelerator
    if ami == NEURON_AMI:
        if accelerator is None or accelerator.vendor != "aws" or accelerator.model == "Inferentia":
            raise ValueError(
                f"inference_ami_version {ami} is for Inferentia2 and Trainium hosts, not {instance_type}; "
                "remove inference_ami_version (SageMaker picks the host AMI) or use an ml.inf2/ml.trn1 type"
            )
    elif accelerator is None or accelerator.vendor != "nvidia":
        raise ValueError(
            f"inference_ami_version {ami} is an NVIDIA GPU host AMI, but {instance_type} has no NVIDIA GPU; "
            "remove inference_ami_version (Neuron hosts get the Neuron AMI automatically)"
        )


class VariantConfig(StrictModel):
    name: str = Field(default="AllTraffic", pattern=_VARIANT)
    instance_type: str
    """A SageMaker hosting type such as `ml.g5.2xlarge` (checked against the catalog)."""
    instance_count: int = Field(default=1, ge=1, le=1000)
    """Initial instances (autoscaling then moves between its min and max)."""
    weight: float = Field(default=1.0, ge=0)
    """Share of traffic relative to the other variants' weights (A/B tests)."""
    inference_ami_version: InferenceAmiVersion | None = None
    """Host AMI. Default: the Neuron AMI for inf1/inf2/trn hosts, SageMaker's default otherwise."""
    autoscaling: RealtimeScalingConfig | None = None
    startup_timeout_seconds: int | None = Field(default=None, ge=60, le=3600)
    """ContainerStartupHealthCheckTimeoutInSeconds: how long SageMaker waits for the container's /ping. Default:
    sized from the model (600 s and up for a model of 1 GiB or more; SageMaker's default otherwise)."""
    download_timeout_seconds: int | None = Field(default=None, ge=60, le=3600)
    """ModelDataDownloadTimeoutInSeconds: how long the artifact download may take. Default: as above."""
    volume_size_gb: int | None = Field(default=None, ge=1, le=512)
    """VolumeSizeInGB of the host's EBS volume (archive + unpacked weights). Only for hosts without local NVMe
    (SageMaker rejects it there). Default: 2.5x the weights + 10 GB for a model of 1 GiB or more."""

    _hosting_type = field_validator("instance_type")(_check_hosting_type)

    @model_validator(mode="after")
    def _ami_fits_the_host(self) -> VariantConfig:
        _check_ami(self.instance_type, self.inference_ami_version)
        if self.volume_size_gb is not None and self.has_local_nvme:
            raise ValueError(
                f"volume_size_gb: {self.instance_type} has local NVMe storage, for which SageMaker rejects "
                "VolumeSizeInGB; remove volume_size_gb or pick a type without local storage"
            )
        return self

    @property
    def has_local_nvme(self) -> bool:
        return get_instance(self.instance_type).has_local_nvme

    @property
    def is_neuron(self) -> bool:
        accelerator = get_instance(self.instance_type).accelerator
        return accelerator is not None and accelerator.vendor == "aws"

    @property
    def ami_version(self) -> str | None:
        """The InferenceAmiVersion to set: the blueprint's, or the Neuron AMI on Inferentia2/Trainium hosts
        (not inf1: the Neuron AMI does not list it, so inf1 keeps SageMaker's default)."""
        if self.inference_ami_version is not None:
            return self.inference_ami_version
        accelerator = get_instance(self.instance_type).accelerator
        return NEURON_AMI if self.is_neuron and accelerator is not None and accelerator.model != "Inferentia" else None


class DataCaptureConfig(StrictModel):
    """Request/response capture to the stack's data bucket (KMS), for Model Monitor."""

    sampling_percent: int = Field(ge=1, le=100)
    mode: Literal["Input", "Output", "InputAndOutput"] = "InputAndOutput"
    prefix: str = Field(default="data-capture", pattern=_PREFIX)


class AlarmConfig(StrictModel):
    latency_p99_ms: float = Field(default=1000, gt=0)
    """ModelLatency p99 above this for 3 of 5 minutes alarms."""
    errors_5xx: int = Field(default=1, ge=1)
    """Invocation5XXErrors per minute at or above this for 3 of 5 minutes alarms."""
    oldest_request_minutes: float = Field(default=60, gt=0, le=1440)
    """Async only: ApproximateAgeOfOldestRequest above this for 3 of 5 minutes alarms."""
    backlog_without_capacity_minutes: int = Field(default=20, ge=1, le=60)
    """Async only: HasBacklogWithoutCapacity for this many minutes in a row alarms (longer than a cold start)."""


class _EndpointBase(StrictModel):
    name: str = Field(pattern=_NAME)
    """Short lower-case name, unique in the blueprint: the construct ID (never a physical name)."""
    traffic: TrafficConfig | None = None
    alarms: AlarmConfig = Field(default_factory=AlarmConfig)

    @property
    def construct_id(self) -> str:
        """`llm-chat` -> `LlmChat`: the endpoint's construct ID in the InferenceStack."""
        return pascal_id(self.name)


class RealtimeEndpointConfig(_EndpointBase):
    mode: Literal["realtime"]
    variants: list[VariantConfig] = Field(min_length=1, max_length=10)
    volume_kms_key: bool | None = None
    """Encrypt the hosts' EBS volumes with the project key. Default: yes unless a variant's host has local NVMe
    (encrypted in hardware; SageMaker rejects a KmsKeyId there). `true` on an NVMe host is an error."""
    data_capture: DataCaptureConfig | None = None

    @model_validator(mode="after")
    def _variants(self) -> RealtimeEndpointConfig:
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variant names {', '.join(dupes)} appear more than once; name each variant once")
        if sum(v.weight for v in self.variants) <= 0:
            raise ValueError("every variant has weight 0: no traffic would be routed; give one a positive weight")
        for v in self.variants:
            if v.autoscaling is not None and v.autoscaling.min_instances == 0:
                raise ValueError(
                    f"variant {v.name}: autoscaling min_instances 0 is only possible for async endpoints (or "
                    "inference components) on SageMaker; use min_instances >= 1 or mode: async"
                )
            if v.autoscaling is not None and not (
                v.autoscaling.min_instances <= v.instance_count <= v.autoscaling.max_instances
            ):
                raise ValueError(
                    f"variant {v.name}: instance_count {v.instance_count} is outside autoscaling "
                    f"{v.autoscaling.min_instances}..{v.autoscaling.max_instances}; set it within the range"
                )
        nvme = [v.instance_type for v in self.variants if v.has_local_nvme]
        if self.volume_kms_key and nvme:
            raise ValueError(
                f"volume_kms_key: true, but {', '.join(nvme)} has local NVMe storage, which SageMaker encrypts in "
                "hardware and for which it rejects a KmsKeyId; remove volume_kms_key or pick a type without "
                "local storage"
            )
        return self

    @property
    def uses_volume_key(self) -> bool:
        return self.volume_kms_key is not False and not any(v.has_local_nvme for v in self.variants)


class ServerlessEndpointConfig(_EndpointBase):
    """Serverless: no instances, no VPC, no GPUs, no data capture (SageMaker Developer Guide, Serverless
    Inference, feature exclusions)."""

    mode: Literal["serverless"]
    memory_mb: int
    max_concurrency: int = Field(ge=1, le=200)
    provisioned_concurrency: int | None = Field(default=None, ge=1, le=200)

    @model_validator(mode="before")
    @classmethod
    def _unsupported(cls, data: Any) -> Any:
        # Say why, instead of the generic "unknown key", for what SageMaker serverless does not offer.
        if isinstance(data, dict):
            unsupported = {
                "data_capture": "data capture (and so Model Monitor)",
                "variants": "multiple production variants or a choice of instance type",
                "instance_type": "instance types or GPUs (it sizes by memory_mb)",
                "instance_count": "instance counts (it scales by max_concurrency)",
                "volume_kms_key": "a volume KMS key",
                "autoscaling": "Application Auto Scaling of instances (it scales by max_concurrency)",
            }
            for key, what in unsupported.items():
                if key in data:
                    raise ValueError(
                        f"{key}: serverless endpoints do not support {what} (SageMaker serverless limits); "
                        "remove it, or use mode: realtime or mode: async"
                    )
        return data

    @field_validator("memory_mb")
    @classmethod
    def _memory(cls, value: int) -> int:
        if value not in SERVERLESS_MEMORY_MB:
            allowed = ", ".join(str(v) for v in SERVERLESS_MEMORY_MB)
            raise ValueError(f"serverless memory_mb must be one of {allowed}")
        return value

    @model_validator(mode="after")
    def _provisioned(self) -> ServerlessEndpointConfig:
        if self.provisioned_concurrency is not None and self.provisioned_concurrency > self.max_concurrency:
            raise ValueError(
                f"provisioned_concurrency ({self.provisioned_concurrency}) exceeds max_concurrency "
                f"({self.max_concurrency}); lower it or raise max_concurrency"
            )
        return self


class AsyncScalingConfig(_ScalingBase):
    """Target tracking on `ApproximateBacklogSizePerInstance`; min 0 scales to zero (with a scale-out-from-zero
    step policy on `HasBacklogWithoutCapacity`)."""

    min_instances: int = Field(default=0, ge=0, le=1000)
    target_backlog_per_instance: float = Field(default=5, gt=0)
    scale_in_cooldown_seconds: int = Field(default=600, ge=0, le=3600)
    scale_out_cooldown_seconds: int = Field(default=120, ge=0, le=3600)
    cold_start_seconds: int = Field(default=300, ge=30, le=3600)
    """Time from a scale-out to the first answer (instance launch, image pull, model load): measure it. The
    scale-out-from-zero policy waits at least this long before adding another instance (an earlier step would
    see the same empty fleet and add instances the first one was about to serve), and the plan bills it."""

    @property
    def scales_to_zero(self) -> bool:
        return self.min_instances == 0


class AsyncEndpointConfig(_EndpointBase):
    mode: Literal["async"]
    instance_type: str
    instance_count: int = Field(default=1, ge=1, le=1000)
    inference_ami_version: InferenceAmiVersion | None = None
    output_path: str | None = Field(default=None, pattern=_PREFIX)
    """Prefix in the stack's data bucket where SageMaker writes results (required)."""
    failure_path: str | None = Field(default=None, pattern=_PREFIX)
    """Prefix for error outputs. Default: `<output_path>-failures`."""
    input_path: str = Field(default="async-input", pattern=_PREFIX)
    """Prefix callers upload request payloads to (grant_invoke lets them write there)."""
    notifications: bool = True
    """SNS success and error topics (KMS-encrypted, TLS-only publish)."""
    max_concurrent_invocations_per_instance: int | None = Field(default=None, ge=1, le=1000)
    autoscaling: AsyncScalingConfig | None = None
    startup_timeout_seconds: int | None = Field(default=None, ge=60, le=3600)
    """ContainerStartupHealthCheckTimeoutInSeconds: how long SageMaker waits for the container's /ping. Default:
    sized from the model (600 s and up for a model of 1 GiB or more; SageMaker's default otherwise)."""
    download_timeout_seconds: int | None = Field(default=None, ge=60, le=3600)
    """ModelDataDownloadTimeoutInSeconds: how long the artifact download may take. Default: as above."""
    volume_size_gb: int | None = Field(default=None, ge=1, le=512)
    """VolumeSizeInGB of the host's EBS volume (archive + unpacked weights). Only for hosts without local NVMe
    (SageMaker rejects it there). Default: 2.5x the weights + 10 GB for a model of 1 GiB or more."""

    data_capture: DataCaptureConfig | None = None

    _hosting_type = field_validator("instance_type")(_check_hosting_type)

    @model_validator(mode="after")
    def _paths(self) -> AsyncEndpointConfig:
        _check_ami(self.instance_type, self.inference_ami_version)
        if self.output_path is None:
            raise ValueError(
                f"async endpoint {self.name!r} has no output_path; add output_path: <prefix> (the data-bucket "
                "prefix where SageMaker writes results)"
            )
        paths = {self.output_path, self.failure_prefix, self.input_path}
        if len(paths) < 3:
            raise ValueError("output_path, failure_path and input_path must differ; give each its own prefix")
        if self.autoscaling is not None and self.instance_count > self.autoscaling.max_instances:
            raise ValueError(
                f"instance_count {self.instance_count} exceeds autoscaling max_instances "
                f"{self.autoscaling.max_instances}; lower instance_count or raise max_instances"
            )
        return self

    @property
    def failure_prefix(self) -> str:
        return self.failure_path or f"{self.output_path}-failures"

    @property
    def variant(self) -> VariantConfig:
        """The endpoint's single variant (async endpoints serve one)."""
        return VariantConfig(
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            inference_ami_version=self.inference_ami_version,
            startup_timeout_seconds=self.startup_timeout_seconds,
            download_timeout_seconds=self.download_timeout_seconds,
            volume_size_gb=self.volume_size_gb,
        )

    @property
    def uses_volume_key(self) -> bool:
        return not self.variant.has_local_nvme


EndpointConfig = Annotated[
    RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig, Field(discriminator="mode")
]


INVOKE_LIMIT_SECONDS = 60
"""SageMaker real-time and serverless InvokeEndpoint: the container must answer within 60 s (SageMaker
"Invoke real-time endpoints" / InvokeEndpoint API reference); a longer client timeout cannot help."""
MAX_INVOKE_API_TIMEOUT = INVOKE_LIMIT_SECONDS + 10
"""The handler's read timeout is the function's minus 5 s: 70 s leaves it at 65 s, just above SageMaker's 60."""
PAYLOAD_LIMIT_BYTES = {name: m.payload_limit_bytes for name, m in MODES.items() if m.payload_limit_bytes is not None}
"""InvokeEndpoint request payload limit per mode (SageMaker endpoint quotas: 6 MB real-time, 4 MB serverless)."""


class InvokeApiConfig(StrictModel):
    """An HTTPS URL (Lambda function URL, IAM auth) in front of one real-time or serverless endpoint."""

    endpoint: str
    """Name of the endpoint in `endpoints` that the API invokes."""
    timeout_seconds: int = Field(default=MAX_INVOKE_API_TIMEOUT, ge=6, le=900)
    """Function timeout; the handler waits `timeout_seconds - 5` for the model. At most 70: SageMaker fails an
    invocation after 60 s anyway (use an async endpoint for longer requests)."""
    memory_mb: int = Field(default=256, ge=128, le=10240)
    callers: list[str] = Field(default_factory=list, max_length=20)
    """IAM role or user ARNs that may call the URL: the stack grants them lambda:InvokeFunctionUrl and
    lambda:InvokeFunction on the function (a resource-based permission). Default: none (grant in your own code)."""

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if value > MAX_INVOKE_API_TIMEOUT:
            raise ValueError(
                f"invoke_api.timeout_seconds {value} cannot help: SageMaker InvokeEndpoint answers within "
                f"{INVOKE_LIMIT_SECONDS} s or fails; use at most {MAX_INVOKE_API_TIMEOUT} (or mode: async for "
                "longer requests)"
            )
        return value

    @field_validator("callers")
    @classmethod
    def _callers(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", v)]
        if bad:
            raise ValueError(
                f"invoke_api.callers {', '.join(map(repr, bad))} are not IAM role or user ARNs; use e.g. "
                "arn:aws:iam::123456789012:role/app"
            )
        return value


class InferenceConfig(StrictModel):
    """A model and the endpoints that serve it."""

    model: InferenceModelConfig
    endpoints: list[EndpointConfig] = Field(min_length=1, max_length=5)
    invoke_api: InvokeApiConfig | None = None
    alarm_emails: list[str] = Field(default_factory=list, max_length=20)
    """Addresses subscribed to the stack's alarm topic (each confirms by e-mail). Every alarm notifies the topic;
    subscribe other targets (chat, paging) to the topic's ARN, output `AlarmTopicArn`."""

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        return email_addresses("alarm_emails", value)

    @model_validator(mode="after")
    def _references(self) -> InferenceConfig:
        names = [e.name for e in self.endpoints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"endpoint names {', '.join(dupes)} appear more than once; name each endpoint once")
        self._check_construct_ids()
        self._check_hosts()
        if self.invoke_api is not None:
            target = next((e for e in self.endpoints if e.name == self.invoke_api.endpoint), None)
            if target is None:
                raise ValueError(
                    f"invoke_api.endpoint {self.invoke_api.endpoint!r} is not an endpoint here; use one of "
                    f"{', '.join(names)}"
                )
            if target.mode == "async":
                raise ValueError(
                    f"invoke_api.endpoint {target.name!r} is async: callers upload to S3 and call "
                    "InvokeEndpointAsync themselves; point invoke_api at a realtime or serverless endpoint"
                )
        return self

    def hosted_variants(self) -> list[tuple[str, VariantConfig]]:
        """(endpoint name, variant) of every instance-backed variant (real-time and async)."""
        result: list[tuple[str, VariantConfig]] = []
        for endpoint in self.endpoints:
            if isinstance(endpoint, RealtimeEndpointConfig):
                result += [(endpoint.name, v) for v in endpoint.variants]
            elif isinstance(endpoint, AsyncEndpointConfig):
                result.append((endpoint.name, endpoint.variant))
        return result

    def _check_hosts(self) -> None:
        model = self.model
        weights = weights_gib(model.parameters_billion, model.precision)
        tag = model.image.tag
        for endpoint, variant in self.hosted_variants():
            problem = (
                host_memory_problem(weights, variant.instance_type)
                or neuron_options_problem(model.environment, model.precision, variant.instance_type)
                or (
                    gpu_ami_problem(variant.inference_ami_version, image_cuda(tag), tag)
                    if is_nvidia_host(variant.instance_type)
                    else None
                )
            )
            if problem:
                raise ValueError(f"endpoint {endpoint!r}, variant {variant.name}: {problem}")

    def host_ami(self, variant: VariantConfig) -> str | None:
        """The InferenceAmiVersion of `variant`: the blueprint's; the Neuron AMI on Inferentia2/Trainium; on an
        NVIDIA host the oldest AMI whose driver supports the CUDA version the image tag names; else None
        (SageMaker's default)."""
        if variant.ami_version is not None or not is_nvidia_host(variant.instance_type):
            return variant.ami_version
        return gpu_ami_for(image_cuda(self.model.image.tag))

    def check_region(self, region: str) -> list[str]:
        """Cross-section rule: a DLC image's registry account fits its registry region (the blueprint's default)."""
        image = self.model.image
        if not isinstance(image, DlcImage):
            return []
        problem = dlc_account_problem(image.account, image.region or region)
        return [problem] if problem else []

    def _check_construct_ids(self) -> None:
        """Endpoint names become construct IDs (`a-b` -> `AB`, plus an `ABEndpointName` output): two names that
        map to one ID, or a name that maps onto the stack's own IDs, would fail the synth."""
        taken: dict[str, str] = dict.fromkeys(_STACK_IDS, "the InferenceStack")
        for endpoint in self.endpoints:
            for construct_id in (endpoint.construct_id, f"{endpoint.construct_id}EndpointName"):
                owner = taken.get(construct_id)
                if owner is not None:
                    raise ValueError(
                        f"endpoint name {endpoint.name!r} becomes construct ID {construct_id!r}, which {owner} "
                        "already uses; rename the endpoint"
                    )
                taken[construct_id] = f"endpoint {endpoint.name!r}"

    def check_network(self, network: NetworkConfig) -> list[str]:
        """Cross-section rule: without NAT, hosts in the VPC reach ECR and S3 only through VPC endpoints."""
        in_vpc = [e.name for e in self.endpoints if endpoint_mode(e.mode).in_vpc]
        if network.nat_gateways or not in_vpc:
            return []
        missing = [
            f"{k} in network.interface_endpoints"
            for k in ("ecr.api", "ecr.dkr")
            if k not in network.interface_endpoints
        ]
        if "s3" not in network.gateway_endpoints:
            missing.append("s3 in network.gateway_endpoints")
        if not missing:
            return []
        return [
            f"network.nat_gateways is 0, so endpoint(s) {', '.join(in_vpc)} can pull the image and the model "
            f"artifact only through VPC endpoints; add {' and '.join(missing)} (or a NAT gateway)"
        ]

    @property
    def needs_data_bucket(self) -> bool:
        return any(
            isinstance(e, AsyncEndpointConfig) or (isinstance(e, RealtimeEndpointConfig) and e.data_capture)
            for e in self.endpoints
        )
