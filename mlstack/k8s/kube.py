"""Kubernetes-facing facts of an instance type: AMI type, accelerator taint and resource, label prefix.

Pure functions of the catalog (no CDK import), shared by the node group construct, the job renderer and the plan.
"""

from __future__ import annotations

from mlstack.catalog import InstanceType

GPU_TAINT = "nvidia.com/gpu"
NEURON_TAINT = "aws.amazon.com/neuron"
EFA_TAINT = "vpc.amazonaws.com/efa"
LABEL_PREFIX = "mlstack.io"
UPDATE_STRATEGY = "MINIMAL"
"""Update strategy of accelerated node groups (AWS::EKS::Nodegroup UpdateConfig.UpdateStrategy): terminate, then
launch, one node at a time; needs no capacity beyond what the group (or its reservation) has."""


def ami_type(it: InstanceType) -> str:
    """The EKS AMI type for `it` (AL2023: AL2 AMIs end with Kubernetes 1.32, EKS AL2 deprecation notice).

    Set as a raw CloudFormation value: CDK's own GPU check does not know p5/p6/trn instance families.
    """
    arm = it.arch == "arm64"
    if it.accelerator is None:
        return "AL2023_ARM_64_STANDARD" if arm else "AL2023_x86_64_STANDARD"
    if it.accelerator.kind == "gpu":
        return "AL2023_ARM_64_NVIDIA" if arm else "AL2023_x86_64_NVIDIA"
    return "AL2023_x86_64_NEURON"  # trainium / inferentia


def accelerator_taint_key(it: InstanceType) -> str | None:
    if it.accelerator is None:
        return None
    return GPU_TAINT if it.accelerator.kind == "gpu" else NEURON_TAINT


def accelerator_resource(it: InstanceType) -> str | None:
    """The extended resource a pod requests for this instance's accelerators."""
    if it.accelerator is None:
        return None
    return "nvidia.com/gpu" if it.accelerator.kind == "gpu" else "aws.amazon.com/neuron"
