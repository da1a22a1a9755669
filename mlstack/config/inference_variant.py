"""One production variant of an instance-backed endpoint, its host AMI and its autoscaling.

Rules checked here (SageMaker Developer Guide, real-time and asynchronous inference; botocore sagemaker model):
a variant's instance type must be in the catalog and offered for SageMaker hosting; an InferenceAmiVersion must
fit the host's accelerator; no VolumeSizeInGB on a host with local NVMe; autoscaling min <= max and a target that
fits its metric.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import get_instance
from mlstack.config.base import StrictModel
from mlstack.errors import CatalogError

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

_VARIANT = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"


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


def check_hosting_type(value: str) -> str:
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


def check_ami(instance_type: str, ami: str | None) -> None:
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

    _hosting_type = field_validator("instance_type")(check_hosting_type)

    @model_validator(mode="after")
    def _ami_fits_the_host(self) -> VariantConfig:
        check_ami(self.instance_type, self.inference_ami_version)
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
