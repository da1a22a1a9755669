"""What an `inference: {engine: eks}` section implies, without the CDK: per endpoint the vLLM server layout and
flags, the node group size, and the serving figures; the names the stack, the manifests and the plan share.

Sizing rules (each from the memory and serving models `mlstack advise --task infer` uses):
- tensor-parallel size: the blueprint's, else the degree with the most output tokens/s per instance among those
  that divide the GPUs and attention heads and fit (`mlstack.design.serving.replica_layout`); one server per
  `tensor_parallel` GPUs, `gpus // tensor_parallel` servers per node;
- `--max-model-len` = prompt + output tokens of `traffic.tokens`; `--max-num-seqs` = its concurrency;
- `--gpu-memory-utilization` = (weights + KV cache of max-num-seqs sequences of max-model-len tokens) per GPU over
  the GPU's memory, plus `ACTIVATION_RESERVE` for activations and the sampler, at most `MAX_UTILIZATION`: vLLM
  preallocates its KV cache from what this fraction leaves after the weights, so the fraction is what bounds the
  cache to the workload's size while leaving the rest of the GPU to CUDA graphs and NCCL buffers;
- nodes: `ceil(replicas / servers per node)` at the minimum and maximum replica counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB
from mlstack.config.inference_eks import EksEndpointConfig, EksInferenceConfig
from mlstack.design.serving import HEADROOM, ServingFigures, estimate_instance, replica_layout

__all__ = [
    "ACTIVATION_RESERVE",
    "API_KEY_FILE",
    "MAX_UTILIZATION",
    "PORT",
    "SERVICE_ACCOUNT",
    "ServerDesign",
    "server_designs",
    "serving_cluster_name",
]

ACTIVATION_RESERVE = 0.08
MAX_UTILIZATION = 0.92
PORT = 8000
"""vLLM's default HTTP port (the OpenAI API, /health and /metrics)."""
SERVICE_ACCOUNT = "vllm"
"""The servers' service account: its Pod Identity role reads the API key secret (nothing else)."""
API_KEY_FILE = "/run/vllm/api-key"
"""Where the init container writes the API key for the server (an in-memory emptyDir)."""
MODEL_DIR = "/models"
"""Where the weights prefix is mounted read-only in the server container."""


def serving_cluster_name(blueprint: str) -> str:
    """The serving cluster's fixed name (its control-plane log group is named after it before it exists); not the
    training cluster's `<name>-cluster`, so a blueprint could hold both."""
    return f"{blueprint}-serving"


@dataclass(frozen=True)
class ServerDesign:
    """One endpoint's vLLM fleet."""

    endpoint: str
    instance_type: str
    gpus_per_node: int
    tensor_parallel: int
    servers_per_node: int
    min_replicas: int
    max_replicas: int
    min_nodes: int
    max_nodes: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    need_gib_per_gpu: float
    gpu_gib: float
    target_requests_waiting: float
    figures: ServingFigures | None

    def vllm_args(self, model_name: str) -> list[str]:
        """The server's command-line flags (besides the API key, read from its file at start)."""
        return [
            MODEL_DIR,
            "--served-model-name",
            model_name,
            "--host",
            "0.0.0.0",
            "--port",
            str(PORT),
            "--tensor-parallel-size",
            str(self.tensor_parallel),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--gpu-memory-utilization",
            f"{self.gpu_memory_utilization:.2f}",
        ]


def _design(config: EksInferenceConfig, endpoint: EksEndpointConfig) -> ServerDesign:
    model = config.model
    it = get_instance(endpoint.instance_type)
    assert it.accelerator is not None
    params = model.parameters_billion * 1e9
    layout = replica_layout(params, model.precision, it, endpoint.workload)
    if layout is None:  # the config validator rejects this blueprint first
        raise ValueError(f"endpoint {endpoint.name!r}: the model fits on no tensor-parallel degree")
    tp = endpoint.tensor_parallel or layout.tensor_parallel
    need = layout.need_bytes_per_device * layout.tensor_parallel / tp
    device = it.accelerator.memory_gib * GIB
    if need > device * (1 - HEADROOM):
        raise ValueError(
            f"endpoint {endpoint.name!r}: tensor_parallel {tp} leaves {need / GIB:,.1f} GiB per GPU, more than "
            f"{(1 - HEADROOM):.0%} of {it.accelerator.memory_gib:g} GiB; raise tensor_parallel or leave it unset"
        )
    servers = it.accelerator.count // tp
    scaling = endpoint.autoscaling
    tokens = endpoint.tokens
    utilization = min(MAX_UTILIZATION, math.ceil((need / device + ACTIVATION_RESERVE) * 100) / 100)
    return ServerDesign(
        endpoint=endpoint.name,
        instance_type=it.name,
        gpus_per_node=it.accelerator.count,
        tensor_parallel=tp,
        servers_per_node=servers,
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        min_nodes=math.ceil(scaling.min_replicas / servers),
        max_nodes=math.ceil(scaling.max_replicas / servers),
        max_model_len=tokens.context_tokens + tokens.output_tokens,
        max_num_seqs=tokens.concurrency,
        gpu_memory_utilization=utilization,
        need_gib_per_gpu=need / GIB,
        gpu_gib=it.accelerator.memory_gib,
        target_requests_waiting=scaling.target_requests_waiting,
        figures=estimate_instance(model.parameters_billion, model.precision, it.name, endpoint.workload),
    )


def server_designs(config: EksInferenceConfig) -> list[ServerDesign]:
    """Every endpoint's design, in blueprint order (raises ValueError for an explicit TP that does not fit)."""
    return [_design(config, e) for e in config.endpoints]
