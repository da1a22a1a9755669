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


LOAD_SECONDS_PER_GIB = 40
"""Download, unpack and load, on the slow side, per GiB of weights."""
NEURON_COMPILE_SECONDS_PER_GIB = 90
"""neuronx-cc compiling a decoder for the serving options at start-up, per GiB of weights: an estimate from LMI's
own examples (a 7B fp16 model compiled at start-up with `option.model_loading_timeout=1600`, a 13B one loaded
pre-compiled with 3600; DJL Serving, LMI Transformers-NeuronX configurations). Measure yours and set
`startup_timeout_seconds`."""
MIN_LARGE_MODEL_SECONDS = 600
MIN_NEURON_SECONDS = 900
"""A Neuron host loads even a pre-compiled graph through host memory and shards it across NeuronCores (TP) before
/ping answers: 600 s covers an 8B model with little margin, so Neuron hosts get at least 900 s."""
MAX_STARTUP_SECONDS = 3600
"""ContainerStartupHealthCheckTimeoutInSeconds and ModelDataDownloadTimeoutInSeconds: 60..3600 (SageMaker API
reference, ProductionVariant)."""
LMI_MODEL_LOADING_TIMEOUT = 1800
"""LMI's own `option.model_loading_timeout` default (OPTION_MODEL_LOADING_TIMEOUT): the model server gives up
loading after it, whatever SageMaker waits (DJL Serving, LMI container configurations: "On SageMaker, if you set
this value, you should also set container_startup_health_check_timeout" to at least it)."""


@dataclass(frozen=True)
class StartupLimits:
    """Per-variant start-up settings of a ProductionVariant; None leaves SageMaker's default."""

    startup_timeout_seconds: int | None
    download_timeout_seconds: int | None
    volume_size_gb: int | None
    reason: str
    """Why the health-check timeout is what it is (the plan prints it)."""
    needed_seconds: int | None = None
    """The estimate before the 3600 s cap (above the cap: the container may not start in time)."""


def startup_limits(
    weights: float,
    instance_type: str,
    *,
    startup_timeout_seconds: int | None = None,
    download_timeout_seconds: int | None = None,
    volume_size_gb: int | None = None,
    compiles_at_startup: bool = False,
) -> StartupLimits:
    """The blueprint's values, or defaults sized from the weights for a model of 1 GiB or more: an LLM needs
    minutes to download, unpack and load (about 40 s per GiB on the slow side; at least 600 s, 900 s on a Neuron
    host, at most SageMaker's 3600 s), plus about 90 s per GiB when a Neuron host compiles the model at start-up
    (`compiles_at_startup`); and an EBS volume for the archive plus the unpacked weights (2.5x + 10 GB, at least
    30 GB) where the host has no local NVMe (SageMaker rejects VolumeSizeInGB on NVMe hosts)."""
    large = weights >= 1.0
    load = max(MIN_LARGE_MODEL_SECONDS, math.ceil(weights * LOAD_SECONDS_PER_GIB)) if large else None
    accelerator = get_instance(instance_type).accelerator
    minimum = MIN_NEURON_SECONDS if accelerator is not None and accelerator.vendor == "aws" else MIN_LARGE_MODEL_SECONDS
    needed = None if load is None else max(minimum, load)
    if compiles_at_startup:
        needed = max(minimum, math.ceil(weights * (LOAD_SECONDS_PER_GIB + NEURON_COMPILE_SECONDS_PER_GIB)))
    timeout = None if needed is None else min(MAX_STARTUP_SECONDS, needed)
    nvme = get_instance(instance_type).has_local_nvme
    volume = min(512, max(30, math.ceil(weights * 2.5) + 10)) if large and not nvme else None
    if startup_timeout_seconds is not None:
        reason = f"{startup_timeout_seconds} s, set by the blueprint (startup_timeout_seconds)"
    elif timeout is None:
        reason = "SageMaker's default: a model under 1 GiB loads in seconds"
    elif compiles_at_startup:
        reason = (
            f"{timeout} s: the Neuron container compiles the model at start-up (about "
            f"{LOAD_SECONDS_PER_GIB + NEURON_COMPILE_SECONDS_PER_GIB} s per GiB of {weights:.1f} GiB"
            + (f", capped at SageMaker's {MAX_STARTUP_SECONDS} s" if needed and needed > MAX_STARTUP_SECONDS else "")
            + "); ship a pre-compiled graph (neuron_compiled_graph) to start in minutes"
        )
    else:
        reason = (
            f"{timeout} s: download, unpack and load {weights:.1f} GiB of weights (about {LOAD_SECONDS_PER_GIB} s "
            f"per GiB, at least {minimum} s{' on a Neuron host' if minimum == MIN_NEURON_SECONDS else ''}"
            + (f", capped at SageMaker's {MAX_STARTUP_SECONDS} s" if needed and needed > MAX_STARTUP_SECONDS else "")
            + ")"
        )
    return StartupLimits(
        startup_timeout_seconds=startup_timeout_seconds or timeout,
        download_timeout_seconds=download_timeout_seconds or (None if load is None else min(MAX_STARTUP_SECONDS, load)),
        volume_size_gb=volume_size_gb or volume,
        reason=reason,
        needed_seconds=None if startup_timeout_seconds is not None else needed,
    )
