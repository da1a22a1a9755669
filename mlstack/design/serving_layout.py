"""How one vLLM server of an EKS endpoint is laid out on its instances, without the CDK: GPUs or Neuron chips per
pod, `--tensor-parallel-size`, `--pipeline-parallel-size` and the nodes one server spans.

Rules (the advisor's, `mlstack.catalog.infer_advisor`):
- single node first: the tensor-parallel degree with the most output tokens/s per instance among those that divide
  the devices and the attention heads and fit (`mlstack.design.serving.replica_layout`), or the blueprint's degree;
- multi-node only when no single-node degree fits (or the blueprint asks for `nodes` > 1): one server over `nodes`
  whole nodes, `--tensor-parallel-size` = the GPUs of one node and `--pipeline-parallel-size` = the nodes (vLLM
  docs, "Parallelism and Scaling": tensor parallel inside a node, pipeline parallel across nodes), the fewest nodes
  that fit; it needs EFA (the instance must support it), as the advisor does;
- Neuron (Inferentia2, Trainium): the degree is counted in NeuronCores (vLLM's `--tensor-parallel-size` on Neuron
  is the NeuronCores the model is sharded over; vllm-project/vllm-neuron README), a pod requests whole chips
  (`aws.amazon.com/neuron`); one node only (the Neuron vLLM image for Inf2/Trn1 serves on one instance); Inferentia
  (inf1, NeuronCore-v1) serves no decoder LLM (`INF1_CUT`).
Errors are `LayoutError` with the fix, without the endpoint's name (the config adds it).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.catalog.infer_advisor import INF1_CUT
from mlstack.catalog.instances import InstanceType
from mlstack.catalog.memory import GIB, precision_bytes, shape_for_params
from mlstack.catalog.serving_model import estimate_serving, hardware_for, kv_bytes_per_token
from mlstack.design.serving import (
    HEADROOM,
    ServingFigures,
    Workload,
    estimate_instance,
    replica_layout,
    serving_bytes,
)

__all__ = ["MAX_NODES", "NEURON_HOST_SHARE", "EndpointLayout", "LayoutError", "endpoint_layout"]

MAX_NODES = 16
"""Most nodes one server may span (the blueprint's `nodes` bound)."""
NEURON_HOST_SHARE = 0.8
"""NxD Inference loads the checkpoint into host memory before it shards it over the NeuronCores, so the weights must
fit in this share of the host's memory (the rest for the OS, the kubelet and the compiler) [INFERRED from NxD
Inference's load path; inf2.xlarge's 16 GiB cannot hold an 8B model's 16 GB of bf16 weights]."""


class LayoutError(ValueError):
    """The endpoint cannot be laid out as asked; the message names the fix."""


@dataclass(frozen=True)
class EndpointLayout:
    """One server of an endpoint: `nodes` pods (one per node) of `devices_per_pod` accelerators each."""

    kind: str
    """`gpu` or `neuron`."""
    devices_per_node: int
    devices_per_pod: int
    """GPUs or Neuron chips one pod requests (`nvidia.com/gpu` / `aws.amazon.com/neuron`)."""
    tensor_parallel: int
    """`--tensor-parallel-size`: GPUs of one pod, or NeuronCores."""
    pipeline_parallel: int
    """`--pipeline-parallel-size`: the nodes one server spans (1: a single-node server)."""
    servers_per_node: int
    need_bytes_per_device: float
    """Weights and KV cache per accelerator device (a GPU or a Neuron chip)."""
    device_bytes: float
    figures: ServingFigures | None

    @property
    def nodes(self) -> int:
        return self.pipeline_parallel


def _multi_node(
    params_b: float, precision: str, it: InstanceType, workload: Workload, nodes: int | None
) -> EndpointLayout:
    acc = it.accelerator
    assert acc is not None
    params = params_b * 1e9
    need = serving_bytes(params, precision, workload)
    device = acc.memory_gib * GIB
    usable = device * (1 - HEADROOM)
    counts = [nodes] if nodes is not None else list(range(2, MAX_NODES + 1))
    fit = next((n for n in counts if need / (n * acc.count) <= usable), None)
    if fit is None:
        tried = counts[-1]
        raise LayoutError(
            f"{params_b:g}B parameters at {precision} with the KV cache of {workload.concurrency} sequences of "
            f"{workload.context_tokens + workload.output_tokens} tokens need {need / GIB:,.0f} GiB, more than "
            f"{tried} {it.name} node(s) hold at {1 - HEADROOM:.0%} of {tried * acc.count}x {acc.memory_gib:g} GiB; "
            "raise nodes, pick a larger instance (`mlstack advise --task infer`) or lower traffic.tokens.concurrency"
        )
    if not it.efa_supported:
        raise LayoutError(
            f"{it.name} has no EFA, and one server over {fit} nodes exchanges activations between them every token; "
            "pick an instance with EFA (g5/g6/g6e 8xlarge and up, p4d or p5 types) or one that holds the model alone"
        )
    shape = shape_for_params(params)
    if shape.heads % acc.count:
        raise LayoutError(
            f"the model's {shape.heads} attention heads do not divide over the {acc.count} GPUs of {it.name} "
            "(tensor parallel inside each node); pick an instance whose GPU count divides them"
        )
    figures = None
    hardware = hardware_for(it)
    if hardware is not None:
        est = estimate_serving(
            params=params,
            weight_bytes=precision_bytes(precision),
            kv_token_bytes=kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2.0),
            precision=precision.lower(),
            context=workload.context_tokens,
            output_tokens=workload.output_tokens,
            concurrency=workload.concurrency,
            devices=fit * acc.count,
            hardware=hardware,
        )
        # The advisor's multi-node estimate: one replica over every device of the nodes, inter-node latency ignored.
        figures = ServingFigures(
            "estimate",
            est.output_tokens_per_s,
            f"serving model: TP{acc.count} x PP{fit} over {fit} nodes (one server), {workload.concurrency} sequences, "
            f"{workload.context_tokens} prompt + {workload.output_tokens} output tokens, {est.bound}-bound decode; "
            "inter-node latency not modelled",
            est.ttft_s * 1e3,
            est.tpot_s * 1e3,
        )
    return EndpointLayout("gpu", acc.count, acc.count, acc.count, fit, 1, need / (fit * acc.count), device, figures)


def endpoint_layout(
    params_b: float,
    precision: str,
    it: InstanceType,
    workload: Workload,
    *,
    tensor_parallel: int | None = None,
    nodes: int | None = None,
) -> EndpointLayout:
    """The layout of one server of `params_b` billion parameters on `it` (raises `LayoutError`).
    `tensor_parallel`: GPUs per server, or NeuronCores on Neuron; `nodes`: the nodes one server spans."""
    acc = it.accelerator
    if acc is None or acc.kind not in ("gpu", "trainium", "inferentia"):
        raise LayoutError(
            f"{it.name} has no NVIDIA GPU or Neuron accelerator; pick a g5/g6/g6e/p4/p5 or inf2/trn1 type"
        )
    if acc.model == "Inferentia":
        raise LayoutError(f"{it.name}: {INF1_CUT.removeprefix('cut: ')}; pick an inf2 or trn1 type")
    neuron = acc.kind != "gpu"
    cores = (acc.neuron_cores_per_device or 1) if neuron else 1
    if nodes is not None and nodes > 1:
        if neuron:
            raise LayoutError(
                f"{it.name}: nodes {nodes}, but the Neuron vLLM image for Inf2/Trn1 serves on one instance; set "
                "nodes: 1 and pick an instance with more chips (inf2.48xlarge, trn1.32xlarge)"
            )
        if tensor_parallel is not None and tensor_parallel != acc.count:
            raise LayoutError(
                f"tensor_parallel {tensor_parallel} with nodes {nodes}: a multi-node server uses every GPU of each "
                f"node ({acc.count} on {it.name}); leave tensor_parallel unset"
            )
        return _multi_node(params_b, precision, it, workload, nodes)
    params = params_b * 1e9
    if neuron:
        host = it.memory_gib * GIB * NEURON_HOST_SHARE
        weights = params * precision_bytes(precision)
        if weights > host:
            raise LayoutError(
                f"{it.name} has {it.memory_gib:g} GiB of host memory, and Neuron loads the {weights / GIB:,.1f} GiB of "
                f"weights there before sharding them (more than {NEURON_HOST_SHARE:.0%}); pick a larger size "
                "(inf2.8xlarge and up)"
            )
        if tensor_parallel is not None and (tensor_parallel % cores or (acc.count * cores) % tensor_parallel):
            raise LayoutError(
                f"tensor_parallel {tensor_parallel} is counted in NeuronCores on {it.name} ({cores} per chip, "
                f"{acc.count * cores} in all); use a multiple of {cores} that divides {acc.count * cores}, or leave it "
                "unset"
            )
    explicit = None if tensor_parallel is None else tensor_parallel // cores  # devices per server
    layout = replica_layout(params, precision, it, workload)
    if layout is None:
        if nodes is None and not neuron and it.efa_supported:
            return _multi_node(params_b, precision, it, workload, None)  # or its error: the fewest nodes tried
        raise LayoutError(
            f"{params_b:g}B parameters at {precision} with the KV cache of {workload.concurrency} sequences of "
            f"{workload.context_tokens + workload.output_tokens} tokens fit on no tensor-parallel degree of {it.name} "
            f"({acc.count}x {acc.memory_gib:g} GiB)"
            + ("" if neuron or it.efa_supported else " nor over several nodes (it has no EFA)")
            + "; pick a larger instance (`mlstack advise --task infer`) or lower traffic.tokens.concurrency"
        )
    if explicit is not None and acc.count % explicit:
        raise LayoutError(
            f"tensor_parallel {tensor_parallel} does not divide the {acc.count} GPUs of {it.name}; use a divisor or "
            "leave it unset"
        )
    devices = explicit or layout.tensor_parallel
    per_device = layout.need_bytes_per_device * layout.tensor_parallel / devices
    if per_device > layout.device_bytes * (1 - HEADROOM):
        unit = "chip" if neuron else "GPU"
        raise LayoutError(
            f"tensor_parallel {tensor_parallel} leaves {per_device / GIB:,.1f} GiB of weights and KV cache per {unit}, "
            f"more than {1 - HEADROOM:.0%} of {acc.memory_gib:g} GiB; raise tensor_parallel (the advisor picks "
            f"{layout.tensor_parallel * cores}) or leave it unset"
        )
    heads = shape_for_params(params).heads
    if neuron and heads % (devices * cores):
        raise LayoutError(
            f"the model's {heads} attention heads do not divide over {devices * cores} NeuronCores of {it.name}; set "
            "tensor_parallel to a NeuronCore count that divides them"
        )
    figures = estimate_instance(params_b, precision, it.name, workload, devices)
    return EndpointLayout(
        "neuron" if neuron else "gpu",
        acc.count,
        devices,
        devices * cores,
        1,
        acc.count // devices,
        per_device,
        layout.device_bytes,
        figures,
    )
