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


JOB_CPU_SHARE = 0.9
JOB_MEMORY_SHARE = 0.8
"""A training pod takes 90% of its node's vCPUs and 80% of its memory: the rest is for what runs on every node beside
it (kubelet and system reserve, the VPC CNI, kube-proxy, the device plugins, the node and health-monitoring agents,
Fluent Bit), whose sum EKS subtracts from the node's allocatable capacity."""


def job_cpu(it: InstanceType) -> int:
    """vCPUs one training pod requests on `it` (`JOB_CPU_SHARE`, at least 1)."""
    return max(1, int(it.vcpus * JOB_CPU_SHARE))


def job_memory_gib(it: InstanceType) -> int:
    """GiB one training pod requests on `it` (`JOB_MEMORY_SHARE`)."""
    return int(it.memory_gib * JOB_MEMORY_SHARE)
