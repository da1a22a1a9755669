"""Rules of `training.job` (the example job `mlstack plan` renders and the deploy hands to the cluster): which image
runs which script, and where HyperPod's job auto-resume can see the job.

The default job runs the reference script (`SHIPPED_SCRIPT`) in the image the deploy builds from
`runtime/containers/train.Dockerfile` (a CDK Docker image asset). A stock image has neither that script nor
DeepSpeed, and the script runs on CUDA or CPU, never on Neuron: those combinations are one-line errors here, so a
blueprint never deploys a job that fails at its first step. `TrainingConfig` calls `job_problems`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mlstack.catalog.dlc_registries import dlc_registries

if TYPE_CHECKING:
    from mlstack.config.training import TrainingConfig

SHIPPED_SCRIPT = "/opt/mlstack/runtime/workloads/train.py"
"""Where runtime/containers/train.Dockerfile puts the reference script (runtime/workloads/train.py)."""
OLD_PLACEHOLDER = "SET-training.job.image"
"""What earlier releases printed for an unset image; a blueprint copied from that output names it."""
HYPERPOD_JOB_NAMESPACE = "hyperpod-training"
"""Default job namespace on engine hyperpod-eks: HyperPod job auto-resume acts on jobs "running under the kubeflow
namespace or a namespace prefixed with hyperpod" (SageMaker HyperPod docs, "Running jobs using the SageMaker
HyperPod CLI", enabling job auto-resume). Not `kubeflow` itself: the HyperPod chart owns that namespace, and a
namespace the stack creates is deleted with it."""

_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/")
_PUBLIC_DLC = "public.ecr.aws/deep-learning-containers/"


def stock_image(image: str) -> bool:
    """True for an AWS Deep Learning Container (a DLC registry account, or its ECR Public mirror) or the old
    placeholder: images that do not contain mlstack's reference script."""
    if image == OLD_PLACEHOLDER or image.startswith(_PUBLIC_DLC):
        return True
    match = _ECR_IMAGE.match(image)
    return match is not None and match.group(1) in dlc_registries().accounts


def hyperpod_namespace(namespace: str) -> bool:
    return namespace == "kubeflow" or namespace.startswith("hyperpod")


def job_problems(training: TrainingConfig) -> list[str]:
    """One line per problem of `training.job` (empty when fine)."""
    job = training.job
    group = training.job_group
    accel = group.instance.accelerator
    neuron = accel is not None and accel.kind != "gpu"
    problems: list[str] = []
    if neuron and job.script == SHIPPED_SCRIPT:
        problems.append(
            f"training.job.script: the shipped reference script {SHIPPED_SCRIPT} runs on CUDA (NCCL) or CPU (gloo), "
            f"not on Neuron ({group.instance_type} in node group {group.name!r}); set training.job.script to your "
            "torch-neuronx script and training.job.image to a Neuron image that holds it (built FROM the Neuron Deep "
            "Learning Container pytorch-training-neuronx)"
        )
    elif neuron and job.image is None:
        problems.append(
            f"training.job.image: not set, so the deploy would build runtime/containers/train.Dockerfile, a CUDA "
            f"image that cannot drive the Neuron devices of {group.instance_type}; set a Neuron training image (e.g. "
            "the Neuron Deep Learning Container pytorch-training-neuronx, or your build FROM it)"
        )
    elif job.image is not None and job.script == SHIPPED_SCRIPT and stock_image(job.image):
        problems.append(
            f"training.job.image: {job.image!r} is a stock image without the shipped script {SHIPPED_SCRIPT} or "
            "DeepSpeed; remove training.job.image so the deploy builds runtime/containers/train.Dockerfile, or set "
            "training.job.script to a script your image holds"
        )
    if training.engine == "hyperpod-eks" and not hyperpod_namespace(job.namespace):
        problems.append(
            f"training.job.namespace: {job.namespace!r} is outside the namespaces HyperPod job auto-resume watches "
            f"(kubeflow, or a name starting with hyperpod); use {HYPERPOD_JOB_NAMESPACE!r} (the default on "
            "hyperpod-eks)"
        )
    return problems
