"""The endpoints of the `inference:` section, one model per mode: real-time, serverless and asynchronous.

Rules checked here, each with a message that names the fix (limits: SageMaker endpoint quotas and the SageMaker
Developer Guide's real-time, serverless and asynchronous inference pages):
- serverless memory is one of 1024..6144 MB in 1024 steps, concurrency 1-200, provisioned <= max, and none of
  the features serverless endpoints do not offer;
- real-time variants cannot scale to zero (only endpoints with inference components can);
- a KMS volume key cannot be asked for when a variant's host has local NVMe (SageMaker rejects KmsKeyId there);
- an async endpoint needs an output path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.config.base import StrictModel, pascal_id
from mlstack.config.inference_model import TrafficConfig
from mlstack.config.inference_variant import (
    AsyncScalingConfig,
    InferenceAmiVersion,
    VariantConfig,
    check_ami,
    check_hosting_type,
)

SERVERLESS_MEMORY_MB = (1024, 2048, 3072, 4096, 5120, 6144)
"""`ServerlessConfig.MemorySizeInMB` values SageMaker accepts (botocore sagemaker model)."""

_NAME = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
_PREFIX = r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$"


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

    _hosting_type = field_validator("instance_type")(check_hosting_type)

    @model_validator(mode="after")
    def _paths(self) -> AsyncEndpointConfig:
        check_ami(self.instance_type, self.inference_ami_version)
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
