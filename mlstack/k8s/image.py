"""The training job's image: which one runs, where it comes from, and what the deploy builds (no CDK import).

With `training.job.image` unset, `cdk deploy` builds `runtime/containers/train.Dockerfile` as a CDK Docker image
asset and pushes it to the CDK bootstrap repository (`cdk-hnb659fds-container-assets-<account>-<region>`); the
job manifest the deploy puts on the cluster (EKS engines), or the Batch job definition (engine batch), names that
image. The build context is the shipped `runtime/`
folder (present in a checkout and in an installed package alike), cut down to the files the Dockerfile copies:
the context, and so the image tag (a hash of it), changes only when those files do.
"""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.config.training import SHIPPED_SCRIPT, TrainingConfig
from mlstack.config.training_engines import EKS_ENGINES

IMAGE_ENGINES = (*EKS_ENGINES, "batch")
"""Engines whose deploy builds the training image when `training.job.image` is unset (hyperpod-slurm runs the
script from FSx with the cluster's own Python)."""

TRAIN_DOCKERFILE = "containers/train.Dockerfile"
"""The training image's Dockerfile, relative to the build context `runtime/`."""
TRAIN_IMAGE_FILES = (
    TRAIN_DOCKERFILE,
    "__init__.py",
    "workloads/__init__.py",
    "workloads/comm.py",
    "workloads/elastic.py",
    "workloads/lm.py",
    "workloads/train.py",
)
"""Every file of `runtime/` the build reads (the Dockerfile and what it COPYs); nothing else enters the context."""
IMAGE_OUTPUT = "TrainingImageUri"
"""Stack output with the URI of the image the deploy built."""
BUILT_IMAGE = "<image built by cdk deploy: stack output TrainingImageUri>"
"""What `mlstack plan` shows in place of the built image's URI: its tag is a content hash CDK computes at synth."""
JOB_CONFIGMAP = "mlstack-job"
JOB_CONFIGMAP_KEY = "job.yaml"
IMAGE_CONTEXT_KEY = "training-image"
"""CDK context (`-c training-image=URI`): use URI instead of building the image (no Docker engine needed at
deploy; the local deploy and CI use it). Same effect as setting `training.job.image`."""
BOOTSTRAP_REPOSITORY = "cdk-hnb659fds-container-assets-<account>-<region>"
"""The CDK bootstrap stack's image repository (default qualifier hnb659fds), where `cdk deploy` pushes assets."""


def build_excludes() -> list[str]:
    """Docker-ignore patterns for the build context: everything but `TRAIN_IMAGE_FILES` (and no byte code)."""
    return ["*", *(f"!{path}" for path in TRAIN_IMAGE_FILES), "**/__pycache__", "**/*.pyc"]


def builds_image(config: BlueprintConfig) -> bool:
    """Whether the deploy builds the training image (an `IMAGE_ENGINES` engine and no `training.job.image`)."""
    training = config.training
    return training is not None and training.engine in IMAGE_ENGINES and training.job.image is None


def first_job_command(training: TrainingConfig) -> str:
    """The command that starts the example job from the manifest the deploy put on the cluster."""
    key = JOB_CONFIGMAP_KEY.replace(".", "\\.")
    return (
        f"kubectl -n {training.job.namespace} get configmap {JOB_CONFIGMAP} -o jsonpath='{{.data.{key}}}' "
        "| kubectl apply -f -"
    )


def image_rows(config: BlueprintConfig) -> list[str]:
    """What `mlstack plan` says about the job's image and script, one line each."""
    assert config.training is not None
    job = config.training.job
    if builds_image(config):
        rows = [
            f"image: built by `cdk deploy` from runtime/containers/train.Dockerfile (context runtime/, only "
            f"{', '.join(TRAIN_IMAGE_FILES[1:])}), FROM the AWS Deep Learning Container for PyTorch on ECR Public, "
            "plus DeepSpeed and the reference script",
            f"pushed to the CDK bootstrap repository {BOOTSTRAP_REPOSITORY} (tag: the content hash); URI in stack "
            f"output {IMAGE_OUTPUT}; needs a Docker engine where `cdk deploy` runs (or -c {IMAGE_CONTEXT_KEY}=URI)",
        ]
    else:
        where = (
            "written into the Batch job definition" if config.training.engine == "batch" else "not built by the deploy"
        )
        rows = [f"image: {job.image} (training.job.image, {where})"]
    if job.script == SHIPPED_SCRIPT:
        rows.append(f"script: {job.script} (the reference script, in the image)")
    else:
        where = "on FSx: copy it there before the job starts" if job.script.startswith("/fsx/") else "in the image"
        rows.append(f"script: {job.script} (yours, {where}; no mlstack flags are passed)")
    return rows


def with_job_image(config: BlueprintConfig, image: str) -> BlueprintConfig:
    """`config` with `training.job.image` set to `image` (what `-c training-image=URI` does): the deploy then
    builds nothing and the job runs `image`."""
    training = config.training
    if training is None:
        return config
    job = training.job.model_copy(update={"image": image})
    return config.model_copy(update={"training": training.model_copy(update={"job": job})})
