"""The `mlops:` section of a blueprint (MlopsStack): a SageMaker pipeline, its model registry, approval-to-deploy,
data-quality monitoring and an optional Studio domain.

Domain rules checked here, each with a one-line message that names the fix:
- processing/training/serving/monitoring instance types are catalog types SageMaker offers for that job type;
- several training instances with torchrun need an EFA type (ml.p4d, ml.p5, ml.trn1);
- managed Spot on several instances needs checkpoints; Spot needs max_wait_hours >= max_runtime_hours;
- a training type with local NVMe takes no `volume_size_gb` (SageMaker uses the instance storage);
- Studio user names are unique after dropping "-" (they become construct IDs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import get_instance
from mlstack.catalog.sagemaker_jobs import check_instance
from mlstack.config.base import StrictModel, email_addresses
from mlstack.config.inference import ImageConfig

SCHEDULES = {"hourly": "cron(0 * ? * * *)", "daily": "cron(0 0 ? * * *)"}
"""Model Monitor schedule expressions (hourly is the finest Model Monitor runs)."""


class TrainingStepConfig(StrictModel):
    """The pipeline's training step."""

    instance_type: str = "ml.m7i.xlarge"
    instance_count: int = Field(default=1, ge=1, le=64)
    distribution: Literal["none", "torchrun"] = "none"
    """`torchrun`: the PyTorch container starts torchrun on every instance (SageMaker attaches EFA by itself)."""
    spot: bool = False
    checkpoints: bool = False
    """Write /opt/ml/checkpoints to S3 (needed for Spot on several instances)."""
    max_runtime_hours: float = Field(default=1.0, gt=0, le=672)
    max_wait_hours: float | None = Field(default=None, gt=0, le=672)
    volume_size_gb: int | None = Field(default=None, ge=1, le=16384)
    """EBS volume per training instance; default 50 GB. Not allowed on types with local NVMe (ml.p4d, ml.p5, ml.g5,
    ...): SageMaker trains on the instance storage there and takes neither a volume size nor a volume key."""
    hyperparameters: dict[str, str] = Field(default_factory=lambda: {"epochs": "100"})
    expected_hours: float = Field(default=0.1, gt=0)
    """How long a run of this step takes, for `mlstack plan`'s cost per run."""

    @field_validator("instance_type")
    @classmethod
    def _training_type(cls, value: str) -> str:
        problem = check_instance("training", value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _distributed(self) -> TrainingStepConfig:
        multi = self.instance_count > 1
        if multi and self.distribution == "torchrun" and not get_instance(self.instance_type).efa_supported:
            raise ValueError(
                f"instance_type: {self.instance_type} has no EFA; torchrun on {self.instance_count} instances needs "
                "ml.p4d.24xlarge, ml.p5.48xlarge or ml.trn1.32xlarge (or instance_count: 1)"
            )
        if self.spot and multi and not self.checkpoints:
            raise ValueError("spot: managed Spot on several instances needs checkpoints: true (else restart from 0)")
        if self.spot and (self.max_wait_hours is None or self.max_wait_hours < self.max_runtime_hours):
            raise ValueError(
                f"max_wait_hours: with spot it must be >= max_runtime_hours ({self.max_runtime_hours}) (got "
                f"{self.max_wait_hours})"
            )
        if not self.spot and self.max_wait_hours is not None:
            raise ValueError("max_wait_hours: only for spot: true; remove it")
        it = get_instance(self.instance_type)
        if self.volume_size_gb is not None and it.has_local_nvme:
            raise ValueError(
                f"volume_size_gb: {self.instance_type} trains on its local NVMe ({it.local_nvme_count} x "
                f"{it.local_nvme_gb} GB), SageMaker takes no volume size there; remove volume_size_gb"
            )
        return self


class PipelineConfig(StrictModel):
    processing_instance_type: str = "ml.m7i.xlarge"
    accuracy_threshold: float = Field(default=0.8, ge=0, le=1)
    """Register the model only when the evaluation's accuracy reaches this (pipeline parameter default)."""
    input_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9!_.*'()/-]+/$")
    """Prefix in the artifacts bucket with CSV input; default: the example script generates a data set."""
    training: TrainingStepConfig = Field(default_factory=TrainingStepConfig)
    processing_hours: float = Field(default=0.1, gt=0)
    """Expected duration of each of the three processing steps, for `mlstack plan`."""

    @field_validator("processing_instance_type")
    @classmethod
    def _processing_type(cls, value: str) -> str:
        problem = check_instance("processing", value)
        if problem:
            raise ValueError(problem)
        return value


class ServingConfig(StrictModel):
    """The endpoint approved versions go to (created by the deploy function on the first approval)."""

    instance_type: str = "ml.m7i.large"
    instance_count: int = Field(default=1, ge=1, le=100)
    capture_percent: int = Field(default=100, ge=0, le=100)

    @property
    def volume_key(self) -> bool:
        """SageMaker rejects an endpoint config's KmsKeyId on hosts with local NVMe (those disks are encrypted)."""
        return not get_instance(self.instance_type).has_local_nvme

    @field_validator("instance_type")
    @classmethod
    def _hosting_type(cls, value: str) -> str:
        problem = check_instance("hosting", value)
        if problem:
            raise ValueError(problem)
        return value


class MonitoringConfig(StrictModel):
    instance_type: str = "ml.m7i.large"
    schedule: Literal["hourly", "daily"] = "hourly"
    image: ImageConfig
    """The Model Monitor analyzer image of the region (SageMaker Python SDK image_uri_config/model-monitor.json)."""

    @property
    def volume_key(self) -> bool:
        """A monitoring type with local NVMe takes no volume key (like processing jobs)."""
        return not get_instance(self.instance_type).has_local_nvme

    @field_validator("instance_type")
    @classmethod
    def _processing_type(cls, value: str) -> str:
        problem = check_instance("processing", value)
        if problem:
            raise ValueError(problem)
        return value


class StudioConfig(StrictModel):
    users: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("users")
    @classmethod
    def _users(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if not name or len(name) > 63 or not name.replace("-", "").isalnum() or name != name.lower():
                raise ValueError(f"{name!r}: a user profile name is lower-case letters, digits and -")
            if name.replace("-", "") in seen:
                raise ValueError(f"{name!r}: another user has the same name without '-'; rename one")
            seen.add(name.replace("-", ""))
        return value


class Images(StrictModel):
    training: ImageConfig
    """Training image; also the serving image of registered versions."""
    processing: ImageConfig
    serving: ImageConfig | None = None
    """Image registered with each version and used by the endpoint; default: the training image."""


class MlopsConfig(StrictModel):
    images: Images
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    monitoring: MonitoringConfig
    studio: StudioConfig | None = None
    """A Studio domain in VPC-only mode; omit for none. Its users may approve versions of the group."""
    alarm_emails: list[str] = Field(default_factory=list, max_length=20)
    """Addresses subscribed to the stack's alarm topic (each confirms by e-mail): failed pipeline executions, deploy
    function errors and dead letters, monitoring runs with violations. Empty: the topic exists with no subscriber;
    subscribe other targets to output `AlarmTopicArn`."""

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        return email_addresses("alarm_emails", value)
