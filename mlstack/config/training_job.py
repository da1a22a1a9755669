"""Rules of `training.job` (the example job `mlstack plan` renders and the deploy hands to the cluster): which image
runs which script, and where HyperPod's job auto-resume can see the job.

The default job runs the reference script (`SHIPPED_SCRIPT`) in the image the deploy builds from
`runtime/containers/train.Dockerfile` (a CDK Docker image asset). A stock image has neither that script nor
DeepSpeed, and the script runs on CUDA or CPU, never on Neuron: those combinations are one-line errors here, so a
blueprint never deploys a job that fails at its first step. Its rules are in `training_rules.py`.
"""

from __future__ import annotations

import re

from mlstack.catalog.dlc_registries import dlc_registries

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
