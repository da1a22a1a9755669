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


HF_TOOLKIT_REPOSITORY = re.compile(r"^huggingface-(pytorch|tensorflow)-inference(-neuronx?)?$")
"""DLC repositories that serve through the SageMaker Hugging Face Inference Toolkit (not TGI, TEI or LMI). The
toolkit builds a `transformers` pipeline for `HF_TASK`; without it, it reads `architectures[0]` of the model's
config.json and maps it by suffix (`infer_task_from_model_architecture` and `ARCHITECTURES_2_TASK` in
`sagemaker_huggingface_inference_toolkit/transformers_utils.py`, aws/sagemaker-huggingface-inference-toolkit):
every `...ForConditionalGeneration` becomes `text2text-generation`, so Whisper
(`WhisperForConditionalGeneration`) loads as a text model with a tokenizer and fails its start-up health
check; an architecture outside the table fails outright. The stack cannot read config.json at synth, so the
blueprint names the task."""
COMPILED_GRAPH_VARIABLE = "OPTION_COMPILED_GRAPH_PATH"
"""LMI's `option.compiled_graph_path`: an S3 URI or local directory holding the pre-compiled graph (NEFF files or a
Neuron cache) so the Transformers-NeuronX engine skips compiling at start-up (DJL Serving, LMI "Model Artifacts"
and "Transformers-NeuronX Engine in LMI", https://docs.djl.ai/docs/serving/serving/docs/lmi/deployment_guide/
model-artifacts.html). The graph must come from the same Neuron compiler version as the container."""
MODEL_DIR = "/opt/ml/model"
"""Where SageMaker puts the artifact in the container."""

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
    task: str | None = Field(default=None, pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=64)
    """The `transformers` pipeline task, e.g. `automatic-speech-recognition`, `text-classification`: the stack sets
    HF_TASK. Required for a Hugging Face inference DLC (`huggingface-pytorch-inference` and its TensorFlow and
    Neuron variants), whose guess from config.json is wrong for encoder-decoder models such as Whisper; only for
    those images."""
    neuron_compiled_graph: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$")
    """Directory inside the artifact that holds the model compiled for Neuron (NEFF files or a Neuron cache dump),
    e.g. `compiled`: the stack sets OPTION_COMPILED_GRAPH_PATH=/opt/ml/model/<dir> and the LMI container loads it
    instead of running neuronx-cc at start-up. Compile with the container's Neuron SDK version and the serving
    options below (tensor parallel degree, dtype, sequence length, batch size). Default: none, the container
    compiles at start-up, and the start-up health check is sized for it (see `mlstack plan`)."""
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

    @property
    def uses_hf_toolkit(self) -> bool:
        """The image serves through the Hugging Face Inference Toolkit (it reads HF_TASK)."""
        return isinstance(self.image, DlcImage) and HF_TOOLKIT_REPOSITORY.match(self.image.repository) is not None

    @property
    def precompiled_for_neuron(self) -> bool:
        """The artifact carries its compiled Neuron graph: nothing is compiled at start-up."""
        return self.neuron_compiled_graph is not None or COMPILED_GRAPH_VARIABLE in self.environment

    @property
    def container_environment(self) -> dict[str, str]:
        """`environment` plus what the blueprint's own fields set: HF_TASK from `task`, the compiled graph path."""
        result = dict(self.environment)
        if self.task is not None:
            result["HF_TASK"] = self.task
        if self.neuron_compiled_graph is not None:
            result[COMPILED_GRAPH_VARIABLE] = f"{MODEL_DIR}/{self.neuron_compiled_graph.rstrip('/')}"
        return result

    @model_validator(mode="after")
    def _task_for_the_image(self) -> InferenceModelConfig:
        repository = self.image.repository
        in_env = self.environment.get("HF_TASK")
        if self.task is not None and in_env is not None and in_env != self.task:
            raise ValueError(f"task {self.task!r} and environment HF_TASK={in_env!r} differ; remove HF_TASK")
        if self.task is not None and not self.uses_hf_toolkit:
            raise ValueError(
                f"task: only the Hugging Face inference containers read it (HF_TASK), not {repository}; remove task"
            )
        if self.uses_hf_toolkit and self.task is None and in_env is None:
            raise ValueError(
                f"task: {repository} needs the pipeline task (HF_TASK); its guess from config.json maps every "
                "...ForConditionalGeneration model (Whisper, BART, T5) to text2text-generation; set task, e.g. "
                "automatic-speech-recognition"
            )
        if self.neuron_compiled_graph is not None and COMPILED_GRAPH_VARIABLE in self.environment:
            raise ValueError(
                f"neuron_compiled_graph and environment {COMPILED_GRAPH_VARIABLE} both name the compiled graph; "
                "keep one"
            )
        if self.neuron_compiled_graph is not None and ".." in self.neuron_compiled_graph.split("/"):
            raise ValueError(f"neuron_compiled_graph {self.neuron_compiled_graph!r} must stay inside the artifact")
        return self

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


class TokenWorkloadConfig(StrictModel):
    """An LLM request: prompt and output tokens, and how many sequences one instance decodes at once."""

    context_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    output_tokens: int = Field(default=256, ge=1, le=100_000)
    concurrency: int = Field(default=8, ge=1, le=4096)
    """Sequences each model replica runs at once (continuous batching)."""


class TrafficConfig(StrictModel):
    """Assumptions for `mlstack plan`: what the endpoint serves and what one instance can do."""

    requests_per_second: float = Field(gt=0)
    """Average request rate over a month."""
    throughput_per_instance: float | None = Field(default=None, gt=0)
    """Requests per second one instance sustains at the target latency (measure it: load-test your model)."""
    average_duration_ms: float | None = Field(default=None, gt=0)
    """Average time per request (serverless compute and async backlog estimates)."""
    tokens: TokenWorkloadConfig | None = None
    """LLM endpoints: tokens per request and sequences per instance. The plan then prints output tokens/s and $ per
    million output tokens per instance: measured (`mlstack plan --serve-check`), else `throughput_per_instance` x
    `output_tokens`, else the serving model's estimate (`mlstack advise --task infer`)."""
