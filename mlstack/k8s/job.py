"""Render the example multi-node job (runtime/k8s/torch-efa-runtime.yaml) from a blueprint.

The template is a Kubeflow Trainer v2 `TrainingRuntime` (a JobSet pod template) plus a `TrainJob` that uses it.
This module fills in what the blueprint decides: which nodes, how many, and what each pod requests (every
accelerator, every EFA interface of the node, 2 MiB huge pages), the FSx claim, a minimal NCCL environment and
the image (`mlstack.k8s.image`). On engine hyperpod-eks the same pod runs in a Kubeflow `PyTorchJob` instead
(`mlstack.k8s.pytorchjob`), the job type HyperPod's job auto-resume works with.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import yaml

from mlstack import resources, yamlload
from mlstack.catalog import efa_layout
from mlstack.config import BlueprintConfig
from mlstack.config.training import SHIPPED_SCRIPT, TrainingConfig
from mlstack.k8s.elastic_job import elastic_job
from mlstack.k8s.image import BUILT_IMAGE
from mlstack.k8s.kube import (
    EFA_TAINT,
    LABEL_PREFIX,
    accelerator_resource,
    accelerator_taint_key,
    job_cpu,
    job_memory_gib,
)
from mlstack.workloads import resilience
from mlstack.workloads.deepspeed_config import deepspeed_config

TEMPLATE = resources.runtime_path("k8s", "torch-efa-runtime.yaml")
FSX_CLAIM = "fsx"
FSX_MOUNT = resilience.FSX_MOUNT
HUGEPAGES_2MI = "5120Mi"
"""EFA-driver hosts pre-allocate 5128 2 MiB pages; the EKS example job requests 5120Mi (EKS User Guide, "Run
machine learning training on Amazon EKS with Elastic Fabric Adapter")."""
__all__ = ["BUILT_IMAGE", "FSX_CLAIM", "LEGACY_ENV", "SHIPPED_SCRIPT", "render_job", "render_job_yaml"]

# NCCL jobs: variables only needed for old aws-ofi-nccl / libfabric, or harmful on current ones (aws-ofi-nccl
# README, environment variables). Never emitted for a GPU job.
LEGACY_ENV = frozenset(
    {
        "FI_PROVIDER",
        "NCCL_PROTO",
        "FI_EFA_USE_DEVICE_RDMA",
        "FI_EFA_FORK_SAFE",
        "FI_EFA_ENABLE_SHM_TRANSFER",
        "NCCL_MIN_CHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "RDMAV_FORK_SAFE",
    }
)


@functools.cache
def _template_docs() -> tuple[Any, ...]:
    """The template's documents (TrainingRuntime, TrainJob), parsed once per process: callers copy before changing."""
    return tuple(yamlload.safe_load_all(TEMPLATE.read_text(encoding="utf-8")))


def runtime_name(training: TrainingConfig) -> str:
    return f"torch-efa-{training.job_group.name}"


NEURON_EFA_ENV: tuple[tuple[str, str], ...] = (
    ("FI_PROVIDER", "efa"),
    ("FI_EFA_USE_DEVICE_RDMA", "1"),
    ("FI_EFA_FORK_SAFE", "1"),
    ("CCOM_SOCKET_IFNAME", "eth0"),
)
"""Neuron collectives over EFA: the Neuron runtime reaches EFA through libfabric directly (no aws-ofi-nccl), and the
Neuron SDK's multi-node setup ("How to prepare trn1.32xlarge for multi-node execution", torch-neuronx docs) sets
the EFA provider, device RDMA and fork safety; CCOM_SOCKET_IFNAME names the interface of its bootstrap socket (the
pod's eth0), as the Neuron EKS samples do."""


def job_environment(training: TrainingConfig) -> list[dict[str, str]]:
    """GPU: the minimal environment (aws-ofi-nccl >= 1.7 and libfabric >= 1.18 need no EFA variables).
    Neuron with EFA: the libfabric variables the Neuron runtime needs (`NEURON_EFA_ENV`)."""
    group = training.job_group
    it = group.instance
    env = [{"name": "LOGLEVEL", "value": "INFO"}]
    if it.accelerator is not None and it.accelerator.kind == "gpu":
        env.append({"name": "NCCL_DEBUG", "value": "WARN"})
    if it.accelerator is not None and it.accelerator.kind != "gpu" and group.efa:
        env += [{"name": name, "value": value} for name, value in NEURON_EFA_ENV]
    # If os.fork() in dataloader workers fails with "Cannot allocate memory", add FI_EFA_USE_HUGE_PAGE=0:
    # libfabric then allocates its EFA buffers without huge pages (FI_EFA_USE_HUGE_PAGE, libfabric fi_efa(7) man page).
    return env


def script_args(training: TrainingConfig) -> list[str]:
    """Arguments for the shipped reference script (none for a user's own script: its flags are unknown).

    Checkpoints go to FSx (`resilience.checkpoint_args`) and a restarted pod resumes from the newest one; with a
    `model` section the job trains with DeepSpeed ZeRO at the blueprint's stage and precision (the values the
    memory model sized for).
    """
    if training.job.script != SHIPPED_SCRIPT:
        return []
    args: list[str] = resilience.checkpoint_args(training)
    if training.model is not None:
        ds = deepspeed_config(zero_stage=training.model.zero_stage, precision=training.model.precision)
        args += ["--strategy", "deepspeed", "--deepspeed-config", json.dumps(ds, sort_keys=True)]
    return args


def processes_per_node(training: TrainingConfig) -> int:
    """torchrun processes per node: one per GPU, or per NeuronCore."""
    accel = training.job_group.instance.accelerator
    if accel is None:
        return 1
    return accel.count * (accel.neuron_cores_per_device or 1)


def pod_spec(training: TrainingConfig, image: str | None) -> dict[str, Any]:
    """The pod of one job node: node selector, tolerations, requests = limits, FSx, environment, command.

    `image`: the job's image (`training.job.image` wins; None: `BUILT_IMAGE`, what the plan shows for the image the
    deploy builds)."""
    group = training.job_group
    it = group.instance
    runtime = _template_docs()[0]
    replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    pod: dict[str, Any] = copy.deepcopy(replicated["template"]["spec"]["template"]["spec"])
    pod["nodeSelector"] = {f"{LABEL_PREFIX}/node-group": group.name}
    taints = [k for k in (accelerator_taint_key(it), EFA_TAINT if group.efa else None) if k]
    pod["tolerations"] = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in taints]

    resources: dict[str, str | int] = {}
    accel = accelerator_resource(it)
    if accel is not None and it.accelerator is not None:
        resources[accel] = it.accelerator.count
    if group.efa:
        resources["vpc.amazonaws.com/efa"] = sum(1 for nic in efa_layout(it.name) if nic.is_efa)
        resources["hugepages-2Mi"] = HUGEPAGES_2MI
    resources["memory"] = f"{job_memory_gib(it)}Gi"
    resources["cpu"] = str(job_cpu(it))

    container = pod["containers"][0]
    container["image"] = training.job.image or image or BUILT_IMAGE
    container["command"] = [
        *resilience.launcher(training),
        f"--nproc-per-node={processes_per_node(training)}",
        training.job.script,
        *script_args(training),
    ]
    container["env"] = job_environment(training)
    container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    if training.fsx is not None:
        pod["volumes"].append({"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM}})
        container["volumeMounts"].append({"name": "fsx", "mountPath": FSX_MOUNT})
    resilience.graceful_stop(pod)
    return pod


def render_job(config: BlueprintConfig, image: str | None = None) -> list[dict[str, Any]]:
    """The job documents for the blueprint's job node group: a TrainingRuntime and a TrainJob (eks), or one
    PyTorchJob with HyperPod auto-resume (hyperpod-eks). `image`: see `pod_spec`."""
    if config.training is None:
        raise ValueError(f"blueprint {config.name!r} has no training section")
    training = config.training
    if training.engine == "hyperpod-eks":
        from mlstack.k8s.pytorchjob import render_pytorchjob

        return [render_pytorchjob(training, pod_spec(training, image))]
    nodes = training.job.nodes or training.job_group.max_size
    namespace = training.job.namespace
    runtime, job = (copy.deepcopy(doc) for doc in _template_docs())

    runtime["metadata"].update(name=runtime_name(training), namespace=namespace)
    runtime["spec"]["mlPolicy"]["numNodes"] = nodes
    jobset = runtime["spec"]["template"]["spec"]
    jobset["failurePolicy"] = resilience.jobset_failure_policy(training.job.max_retries)
    node_job = jobset["replicatedJobs"][0]["template"]["spec"]
    pod = pod_spec(training, image)
    # A pod failure policy needs restartPolicy Never (batch/v1 JobSpec.podFailurePolicy; the JobSet webhook would
    # default OnFailure: a crashed container restarted in place, alone, up to the Job's default backoffLimit of 6).
    # backoffLimit 0: the first failed pod fails its Job and the JobSet's failure policy decides for every node.
    pod["restartPolicy"] = "Never"
    node_job.update(backoffLimit=0, podFailurePolicy=resilience.pod_failure_policy(pod["containers"][0]["name"]))
    node_job["template"]["spec"] = pod
    job["metadata"].update(name=training.job.name, namespace=namespace)
    job["spec"]["runtimeRef"]["name"] = runtime_name(training)
    job["spec"]["trainer"]["numNodes"] = nodes
    elastic_job(training, runtime, job)
    return [runtime, job]


def render_job_yaml(config: BlueprintConfig, image: str | None = None) -> str:
    """The documents as one YAML stream (`kubectl apply -f -`)."""
    return yaml.safe_dump_all(render_job(config, image), sort_keys=False, default_flow_style=False)
