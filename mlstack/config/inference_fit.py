"""Does the model fit each hosting instance's host memory, and do a Neuron model's serving options match its host?

Kept apart from `inference.py` (the schema): these are the cross-field checks that read the instance catalog.

- Host RAM: a CPU host serves the weights from RAM, and the Neuron runtime loads them through host memory (and
  needs more while it loads or compiles a model at start-up): there the weights plus an OS/runtime reserve must
  fit the host's RAM, or the container is killed at start-up (an error). GPU loaders stream memory-mapped
  shards to the GPU, so a tight GPU host is a plan warning only.
- Neuron options: a model compiled for Neuron fixes its tensor-parallel degree (at most the host's NeuronCores)
  and its dtype; the LMI container's `OPTION_TENSOR_PARALLEL_DEGREE` and `OPTION_DTYPE` must match them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB, precision_bytes

HOST_RESERVE_GIB = 4.0
"""Host memory the OS, the SageMaker agent and the serving process itself use besides the weights."""
NEURON_LOAD_FACTOR = 2.0
"""A Neuron host should hold about twice the weights: the runtime stages them in host memory while it loads
(and, for a model compiled at start-up, while neuronx-cc runs)."""
GPU_LOAD_FACTOR = 1.2
"""A GPU host should hold the weights with some room: the loader reads shards into host memory first."""

_NEURON_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "int8": "int8"}


def weights_gib(parameters_billion: float, precision: str) -> float:
    return parameters_billion * 1e9 * precision_bytes(precision) / GIB


def host_memory_problem(weights: float, instance_type: str) -> str | None:
    """An error when the weights cannot fit the host's RAM at all (the validator rejects the blueprint)."""
    instance = get_instance(instance_type)
    accelerator = instance.accelerator
    if accelerator is not None and accelerator.vendor != "aws":
        return None
    if weights + HOST_RESERVE_GIB <= instance.memory_gib:
        return None
    return (
        f"{instance_type} has {instance.memory_gib:g} GiB of host memory, but the model's {weights:.1f} GiB of "
        f"weights plus {HOST_RESERVE_GIB:g} GiB for the OS and runtime must "
        f"{'load through' if accelerator else 'fit in'} it; pick a larger host of the family or a smaller precision"
    )


def host_memory_warning(weights: float, instance_type: str) -> str | None:
    """A plan warning when the host RAM is tight for loading (below the load factor of its accelerator)."""
    instance = get_instance(instance_type)
    accelerator = instance.accelerator
    if accelerator is None:
        return None
    factor = NEURON_LOAD_FACTOR if accelerator.vendor == "aws" else GPU_LOAD_FACTOR
    if weights * factor <= instance.memory_gib:
        return None
    return (
        f"{instance_type}: {instance.memory_gib:g} GiB of host memory for {weights:.1f} GiB of weights; loading "
        f"{'(and compiling) a Neuron model ' if accelerator.vendor == 'aws' else ''}needs about "
        f"{weights * factor:.0f} GiB: expect slow or failed start-ups, or pick a larger host"
    )


def neuron_options_problem(environment: Mapping[str, str], precision: str, instance_type: str) -> str | None:
    """An error when the Neuron serving options cannot match the host or the model's precision."""
    accelerator = get_instance(instance_type).accelerator
    if accelerator is None or accelerator.vendor != "aws":
        return None
    cores = accelerator.count * (accelerator.neuron_cores_per_device or 1)
    degree = environment.get("OPTION_TENSOR_PARALLEL_DEGREE")
    if degree is not None and (not degree.isdigit() or not 1 <= int(degree) <= cores):
        return (
            f"OPTION_TENSOR_PARALLEL_DEGREE={degree!r}: {instance_type} has {cores} NeuronCores; set 1..{cores} "
            "(the degree the model was compiled for)"
        )
    dtype = environment.get("OPTION_DTYPE")
    expected = _NEURON_DTYPES.get(precision)
    if dtype is not None and expected is not None and dtype.lower() != expected:
        return f"OPTION_DTYPE={dtype!r} does not match model.precision {precision}; set OPTION_DTYPE: {expected}"
    return None


@dataclass(frozen=True)
class StartupLimits:
    """Per-variant start-up settings of a ProductionVariant; None leaves SageMaker's default."""

    startup_timeout_seconds: int | None
    download_timeout_seconds: int | None
    volume_size_gb: int | None


def startup_limits(
    weights: float,
    instance_type: str,
    *,
    startup_timeout_seconds: int | None = None,
    download_timeout_seconds: int | None = None,
    volume_size_gb: int | None = None,
) -> StartupLimits:
    """The blueprint's values, or defaults sized from the weights for a model of 1 GiB or more: an LLM needs
    minutes to download, unpack and load (about 40 s per GiB on the slow side; at least 600 s, at most SageMaker's
    3600 s), and an EBS volume for the archive plus the unpacked weights (2.5x + 10 GB, at least 30 GB) where the
    host has no local NVMe (SageMaker rejects VolumeSizeInGB on NVMe hosts)."""
    large = weights >= 1.0
    timeout = min(3600, max(600, math.ceil(weights * 40))) if large else None
    nvme = get_instance(instance_type).has_local_nvme
    volume = min(512, max(30, math.ceil(weights * 2.5) + 10)) if large and not nvme else None
    return StartupLimits(
        startup_timeout_seconds=startup_timeout_seconds or timeout,
        download_timeout_seconds=download_timeout_seconds or timeout,
        volume_size_gb=volume_size_gb or volume,
    )
