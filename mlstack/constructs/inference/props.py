"""Props of `ModelEndpoint`: small frozen values next to the construct, each field with its default and reason.

They hold what a team sets for its endpoint; the construct turns them into CloudFormation. The blueprint schema
is mapped onto them by `InferenceStack`; a team's own CDK app builds them directly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from aws_cdk import Duration


class ScalingMetric(enum.Enum):
    """What target tracking holds a real-time variant at (Application Auto Scaling predefined metrics)."""

    INVOCATIONS_PER_INSTANCE = "SageMakerVariantInvocationsPerInstance"
    """Invocations per instance per minute: the default, fits models that answer in about a second."""
    CONCURRENT_REQUESTS_PER_MODEL = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    """Requests in flight per model copy, every 10 s: fits LLMs, whose load follows long generations."""


class CaptureMode(enum.Enum):
    INPUT = "Input"
    OUTPUT = "Output"
    INPUT_AND_OUTPUT = "InputAndOutput"


@dataclass(frozen=True)
class VariantScaling:
    """Target tracking of one real-time variant between `min_instances` and `max_instances` (min >= 1)."""

    min_instances: int
    max_instances: int
    target_value: float
    """Invocations per instance per minute, or requests in flight per model (see `metric`)."""
    metric: ScalingMetric = ScalingMetric.INVOCATIONS_PER_INSTANCE
    scale_in_cooldown: Duration = field(default_factory=lambda: Duration.seconds(300))
    """Default 300 s: scale in slowly (a cold start costs minutes)."""
    scale_out_cooldown: Duration = field(default_factory=lambda: Duration.seconds(60))
    """Default 60 s: scale out fast."""


@dataclass(frozen=True)
class Variant:
    """One production variant on ML instances (real-time, or the single variant of an async endpoint)."""

    instance_type: str
    """A SageMaker hosting type, e.g. `ml.g5.2xlarge`."""
    name: str = "AllTraffic"
    instance_count: int = 1
    """Initial instances (scaling then moves between its bounds)."""
    weight: float = 1.0
    """Share of traffic relative to the other variants' weights."""
    ami_version: str | None = None
    """InferenceAmiVersion. Default: SageMaker's host AMI; pin one whose driver runs the image's CUDA version."""
    startup_timeout: Duration | None = None
    """ContainerStartupHealthCheckTimeoutInSeconds. Default: SageMaker's; an LLM needs minutes."""
    download_timeout: Duration | None = None
    """ModelDataDownloadTimeoutInSeconds. Default: SageMaker's; multi-GB weights need minutes."""
    volume_size_gb: int | None = None
    """VolumeSizeInGB. Default: SageMaker's; only for hosts without local NVMe (SageMaker rejects it there)."""
    scaling: VariantScaling | None = None
    """Default: none (a fixed `instance_count`)."""


@dataclass(frozen=True)
class DataCapture:
    """Request/response capture to `data_bucket` under `prefix` (KMS), for Model Monitor."""

    sampling_percent: int
    mode: CaptureMode = CaptureMode.INPUT_AND_OUTPUT
    prefix: str = "data-capture"


@dataclass(frozen=True)
class AsyncScaling:
    """Target tracking on the backlog per instance; `min_instances=0` scales to zero and adds a step policy that
    starts the first instance as soon as a request waits with no capacity."""

    max_instances: int
    min_instances: int = 0
    target_backlog_per_instance: float = 5
    scale_in_cooldown: Duration = field(default_factory=lambda: Duration.seconds(600))
    """Default 600 s: an instance stops only after ten idle minutes."""
    scale_out_cooldown: Duration = field(default_factory=lambda: Duration.seconds(120))
    cold_start: Duration = field(default_factory=lambda: Duration.seconds(300))
    """Launch + image pull + model load. The scale-out-from-zero step waits at least this long (an earlier step
    would see the same empty fleet and add instances the first one was about to serve)."""

    @property
    def scales_to_zero(self) -> bool:
        return self.min_instances == 0


@dataclass(frozen=True)
class AlarmThresholds:
    """When the endpoint's alarms fire (3 of 5 minutes unless said otherwise)."""

    latency_p99_ms: float = 1000
    """ModelLatency p99 above this alarms. An LLM needs seconds: raise it."""
    errors_5xx: int = 1
    """Invocation5XXErrors per minute at or above this alarms."""
    oldest_request_minutes: float = 60
    """Async: ApproximateAgeOfOldestRequest above this alarms."""
    backlog_without_capacity_minutes: int = 20
    """Async: HasBacklogWithoutCapacity this many minutes in a row alarms (longer than a cold start)."""
