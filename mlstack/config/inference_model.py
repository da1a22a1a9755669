"""The served model of the `inference:` section: where its artifact is, which serving image runs it, its size.

Rules checked here: an artifact key is an object (`model.tar.gz`) or, with `uncompressed`, a prefix; an existing
bucket's KMS key only with that bucket; container environment names and sizes as SageMaker accepts them; a model
named by a hub ID is not downloaded into a network-isolated container.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog.dlc_registries import dlc_account
from mlstack.config.base import StrictModel

_S3_KEY = r"^[A-Za-z0-9!_.*'()/-]+$"


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
