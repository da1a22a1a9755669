"""What the serving image needs from the host and where it comes from: CUDA -> host AMI, region -> DLC registry.

- Host AMI: a GPU container built for CUDA X.Y needs a host NVIDIA driver that supports X.Y. SageMaker's default
  GPU hosts run older drivers on many families (470 / CUDA 11.4 on ml.g5, ml.g4dn, ml.p4d: SageMaker guide,
  "Best practices to minimize interruptions during GPU driver upgrades"); `ProductionVariant.InferenceAmiVersion`
  pins a newer one. The CUDA version of each AMI is from the SageMaker API reference (ProductionVariant,
  InferenceAmiVersion; botocore 1.44.8 model). The image's CUDA version is knowable when its tag names it
  (`...-cu124-...`, the Deep Learning Containers convention).
- DLC registry: AWS Deep Learning Containers live in a regional registry whose account differs by region
  (`mlstack/catalog/data/dlc_registries.yaml`).
"""

from __future__ import annotations

import re

from mlstack.catalog import get_instance
from mlstack.catalog.dlc_registries import dlc_account, dlc_registries

GPU_AMI_CUDA: dict[str, tuple[int, int]] = {
    "al2-ami-sagemaker-inference-gpu-2": (12, 2),
    "al2-ami-sagemaker-inference-gpu-2-1": (12, 2),
    "al2-ami-sagemaker-inference-gpu-3-1": (12, 4),
    "al2023-ami-sagemaker-inference-gpu-4-1": (13, 0),
}
"""CUDA version of each NVIDIA host AMI (driver 535, 535, 550, 580)."""
_PIN_ORDER = (
    "al2-ami-sagemaker-inference-gpu-2",
    "al2-ami-sagemaker-inference-gpu-3-1",
    "al2023-ami-sagemaker-inference-gpu-4-1",
)
"""AMIs the default pin picks from, oldest driver first (gpu-2-1 only differs by disabled CUDA-compat mounting)."""

_CUDA_TAG = re.compile(r"(?:^|[-_.])cu(\d)(\d{1,2})(?=$|[-_.])")


def image_cuda(tag: str) -> tuple[int, int] | None:
    """CUDA (major, minor) an image tag names: `...-cu124-...` -> (12, 4), `cu118` -> (11, 8); None otherwise."""
    match = _CUDA_TAG.search(tag)
    if match is None:
        return None
    digits = match.group(1) + match.group(2)
    return int(digits[:-1]), int(digits[-1])


def _dotted(cuda: tuple[int, int]) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def is_nvidia_host(instance_type: str) -> bool:
    accelerator = get_instance(instance_type).accelerator
    return accelerator is not None and accelerator.vendor == "nvidia"


def gpu_ami_for(cuda: tuple[int, int] | None) -> str | None:
    """The oldest NVIDIA host AMI whose driver supports `cuda`; None when the image's CUDA is unknown or newer
    than every AMI (`gpu_ami_problem` reports that)."""
    if cuda is None:
        return None
    return next((ami for ami in _PIN_ORDER if GPU_AMI_CUDA[ami] >= cuda), None)


def gpu_ami_problem(ami: str | None, cuda: tuple[int, int] | None, tag: str) -> str | None:
    """An error when the pinned AMI's CUDA is older than the image's, or no AMI supports the image's CUDA."""
    if cuda is None:
        return None
    if ami is None:
        if gpu_ami_for(cuda) is None:
            newest = max(GPU_AMI_CUDA.values())
            return (
                f"image tag {tag} needs CUDA {_dotted(cuda)}, newer than any SageMaker inference host AMI "
                f"(newest: CUDA {_dotted(newest)}); use an image built for CUDA {_dotted(newest)} or older"
            )
        return None
    host = GPU_AMI_CUDA.get(ami)
    if host is not None and host < cuda:
        return (
            f"inference_ami_version {ami} has CUDA {_dotted(host)}, but image tag {tag} needs CUDA {_dotted(cuda)}; "
            f"use {gpu_ami_for(cuda) or 'an image for an older CUDA'} or remove inference_ami_version"
        )
    return None


def dlc_account_problem(account: str | None, region: str) -> str | None:
    """An error when no DLC registry is known for `region` and none is given, or when the given account is another
    region's DLC registry (a copied 763104351884 in a region with its own registry)."""
    expected = dlc_account(region)
    if account is None:
        if expected is None:
            return (
                f"no AWS Deep Learning Containers registry is known for {region}; set inference.model.image.account "
                "to the registry account of that region"
            )
        return None
    if expected is not None and account != expected and account in dlc_registries().accounts:
        return (
            f"inference.model.image.account {account} is the DLC registry of other regions; {region}'s is "
            f"{expected}: remove account (it comes from the catalog) or set {expected}"
        )
    return None
