"""Memory model for training and inference of transformer models (bytes per device).

Model states: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §3/§5.
With Ψ parameters, mixed-precision Adam keeps 2Ψ bytes of fp16/bf16 parameters, 2Ψ bytes of gradients and KΨ bytes
of optimizer states (fp32 master weights, momentum and variance: K = 12). Across N data-parallel devices:

    no sharding (DDP)   (2 + 2 + K)Ψ
    ZeRO-1 (P_os)       2Ψ + 2Ψ + KΨ/N
    ZeRO-2 (P_os+g)     2Ψ + (2 + K)Ψ/N
    ZeRO-3 (P_os+g+p)   (2 + 2 + K)Ψ/N

The paper's worked example (Ψ = 7.5B, N = 64, K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device.
PyTorch FSDP sharding strategies map onto the stages: NO_SHARD = 0 (DDP), SHARD_GRAD_OP = 2 (parameters are
gathered for forward and backward and kept between them), FULL_SHARD = 3. (HYBRID_SHARD = FULL_SHARD within a
node-sized group, i.e. stage 3 with N = the group size.)

Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4, with
s = sequence length, b = micro-batch, h = hidden size, a = attention heads, t = tensor-parallel degree, L = layers,
16-bit activations, per transformer layer:

    no recomputation, no parallelism         s·b·h·(34 + 5·a·s/h)
    tensor parallel (no sequence parallel)   s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel               s·b·h·(34 + 5·a·s/h) / t
    selective recomputation (+ sequence par.) s·b·h·34 / t
    full recomputation (checkpointing)       2·s·b·h / t   (only each layer's input is kept)

For full recomputation we add one layer's un-checkpointed activations: the layer being recomputed during the
backward pass needs them at the peak. Embeddings, the output layer and pipeline-parallel in-flight micro-batches are
not modelled (they are small next to L layers for large L, or depend on the schedule).

Inference: weights at a precision plus the KV cache, 2 (K and V) x layers x kv_heads x head_dim x context x batch x
bytes per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from mlstack.errors import InputError

__all__ = [
    "BYTES_PER_PARAM",
    "FSDP_TO_ZERO",
    "MAX_PARAMS",
    "ActivationMemory",
    "Checkpointing",
    "InferenceMemory",
    "ModelShape",
    "ModelStateMemory",
    "Precision",
    "activation_memory",
    "inference_memory",
    "kv_cache_bytes",
    "model_state_memory",
    "precision_bytes",
    "shape_for_params",
    "zero_stage_for_fsdp",
]

GB = 1e9
GIB = float(1 << 30)
MAX_PARAMS = 1e14
"""Larger parameter counts are rejected as input errors (100 trillion; today's largest dense models are ~2e12)."""

Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
BYTES_PER_PARAM: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
Checkpointing = Literal["none", "selective", "full"]
ZeroStage = Literal[0, 1, 2, 3]
FSDP_TO_ZERO: dict[str, ZeroStage] = {"NO_SHARD": 0, "SHARD_GRAD_OP": 2, "FULL_SHARD": 3, "HYBRID_SHARD": 3}


def zero_stage_for_fsdp(strategy: str) -> ZeroStage:
    """ZeRO stage equivalent to a PyTorch FSDP `ShardingStrategy` name."""
    try:
        return FSDP_TO_ZERO[strategy.strip().upper()]
    except KeyError:
        raise InputError(
            f"unknown FSDP sharding strategy {strategy!r}; expected one of {', '.join(FSDP_TO_ZERO)}"
        ) from None


def _check_params(params: float) -> None:
    if not params > 0:
        raise InputError(f"parameter count must be positive, got {params:g}")
    if params > MAX_PARAMS:
        raise InputError(f"parameter count {params:g} is absurd (limit {MAX_PARAMS:g})")


def _check_positive_int(name: str, value: int, limit: int = 10_000_000) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    if value > limit:
        raise InputError(f"{name} {value} is out of range (limit {limit})")


@dataclass(frozen=True)
class ModelStateMemory:
    """Per-device bytes of the model states of mixed-precision training."""

    params: float
    devices: int
    zero_stage: int
    optimizer_multiplier: float
    parameters_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.parameters_bytes + self.gradients_bytes + self.optimizer_states_bytes

    def to_json(self) -> dict[str, object]:
        return {
            "params": self.params,
            "devices": self.devices,
            "zero_stage": self.zero_stage,
            "optimizer_multiplier_k": self.optimizer_multiplier,
            "bytes_per_device": {
                "parameters": self.parameters_bytes,
                "gradients": self.gradients_bytes,
                "optimizer_states": self.optimizer_states_bytes,
                "total": self.total_bytes,
            },
            "gb_per_device": {
                "parameters": self.parameters_bytes / GB,
                "gradients": self.gradients_bytes / GB,
                "optimizer_states": self.optimizer_states_bytes / GB,
                "total": self.total_bytes / GB,
            },
        }


def model_state_memory(
    params: float,
    devices: int = 1,
    zero_stage: int = 0,
    *,
    optimizer_multiplier: float = 12.0,
    param_bytes: float = 2.0,
    grad_bytes: float = 2.0,
) -> ModelStateMemory:
    """Bytes per device of parameters, gradients and optimizer states (ZeRO paper formulas, see module doc).

    `optimizer_multiplier` is the paper's K (12 for mixed-precision Adam: fp32 master copy, momentum, variance);
    `param_bytes`/`grad_bytes` are 2 for fp16/bf16 mixed precision (4 and K = 8 describe pure fp32 Adam).
    """
    _check_params(params)
    _check_positive_int("device count", devices)
    if zero_stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if not 0 <= optimizer_multiplier <= 64:
        raise InputError(f"optimizer multiplier K must be between 0 and 64, got {optimizer_multiplier:g}")
    n = devices
    p = param_bytes * params
    g = grad_bytes * params
    o = optimizer_multiplier * params
    if zero_stage >= 1:
        o /= n
    if zero_stage >= 2:
        g /= n
    if zero_stage >= 3:
        p /= n
    return ModelStateMemory(
        params=params,
        devices=devices,
        zero_stage=zero_stage,
        optimizer_multiplier=optimizer_multiplier,
        parameters_bytes=p,
        gradients_bytes=g,
        optimizer_states_bytes=o,
    )


@dataclass(frozen=True)
class ActivationMemory:
    """Per-device activation bytes of one micro-batch through all layers (see module doc for the formula)."""

    per_layer_bytes: float
    layers: int
    extra_bytes: float
    checkpointing: str
    formula: str

    @property
    def total_bytes(self) -> float:
        return self.per_layer_bytes * self.layers + self.extra_bytes


def _layer_no_recompute(s: float, b: float, h: float, a: float, t: int, sequence_parallel: bool) -> float:
    if t == 1 or sequence_parallel:
        return s * b * h * (34 + 5 * a * s / h) / t
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def activation_memory(
    *,
    layers: int,
    hidden: int,
    seq_len: int,
    micro_batch: int,
    heads: int,
    tensor_parallel: int = 1,
    sequence_parallel: bool = True,
    checkpointing: Checkpointing = "full",
    flash_attention: bool = False,
) -> ActivationMemory:
    """Activation bytes per device (Korthikanti et al. 2022; 16-bit activations).

    `flash_attention=True` drops the paper's 5as/h term (the stored a x s x s attention scores, softmax and dropout
    mask), which fused attention kernels such as FlashAttention never materialise.
    """
    for name, value in (
        ("layers", layers),
        ("hidden size", hidden),
        ("sequence length", seq_len),
        ("micro-batch", micro_batch),
        ("attention heads", heads),
        ("tensor-parallel degree", tensor_parallel),
    ):
        _check_positive_int(name, value)
    if hidden % heads:
        raise InputError(f"hidden size {hidden} is not divisible by {heads} attention heads")
    s, b, h, t = float(seq_len), float(micro_batch), float(hidden), tensor_parallel
    a = 0.0 if flash_attention else float(heads)
    full_layer = _layer_no_recompute(s, b, h, a, t, sequence_parallel)
    if checkpointing == "none":
        return ActivationMemory(full_layer, layers, 0.0, checkpointing, "L * sbh(34 + 5as/h) / t")
    if checkpointing == "selective":
        if sequence_parallel or t == 1:
            return ActivationMemory(s * b * h * 34 / t, layers, 0.0, checkpointing, "L * 34sbh / t")
        return ActivationMemory(s * b * h * (10 + 24 / t), layers, 0.0, checkpointing, "L * sbh(10 + 24/t)")
    if checkpointing == "full":
        kept = 2 * s * b * h / (t if sequence_parallel else 1)
        return ActivationMemory(kept, layers, full_layer, checkpointing, "L * 2sbh / t + one layer recomputed")
    raise InputError(f"activation checkpointing must be none, selective or full, got {checkpointing!r}")


def kv_cache_bytes(
    *, layers: int, kv_heads: int, head_dim: int, context: int, batch: int, bytes_per_element: float = 2.0
) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x context x batch x bytes."""
    for name, value in (
        ("layers", layers),
        ("KV heads", kv_heads),
        ("head dim", head_dim),
        ("context length", context),
        ("batch / concurrency", batch),
    ):
        _check_positive_int(name, value)
    return 2.0 * layers * kv_heads * head_dim * context * batch * bytes_per_element


@dataclass(frozen=True)
class InferenceMemory:
    weights_bytes: float
    kv_cache_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes


def precision_bytes(precision: str) -> float:
    try:
        return BYTES_PER_PARAM[precision.lower()]
    except KeyError:
        raise InputError(f"unknown precision {precision!r}; expected one of {', '.join(BYTES_PER_PARAM)}") from None


def inference_memory(
    params: float,
    *,
    precision: str = "bf16",
    layers: int,
    kv_heads: int,
    head_dim: int,
    context: int,
    batch: int,
    kv_precision: str = "bf16",
) -> InferenceMemory:
    """Weights at `precision` plus a KV cache for `batch` sequences of `context` tokens (total, not per device)."""
    _check_params(params)
    weights = params * precision_bytes(precision)
    kv = kv_cache_bytes(
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        context=context,
        batch=batch,
        bytes_per_element=precision_bytes(kv_precision),
    )
    return InferenceMemory(weights_bytes=weights, kv_cache_bytes=kv)


@dataclass(frozen=True)
class ModelShape:
    """Transformer dimensions the activation and KV-cache formulas need."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int

    def describe(self) -> str:
        return (
            f"{self.name}-like: {self.layers} layers, hidden {self.hidden}, {self.heads} heads, "
            f"{self.kv_heads} KV heads x {self.head_dim}"
        )


# Published configurations (config.json of each model / GPT-3 paper table 2.1), used when the user gives only a
# parameter count: the nearest one on a log scale stands in for the architecture.
REFERENCE_SHAPES: tuple[ModelShape, ...] = (
    ModelShape("GPT-3-125M", 125e6, 12, 768, 12, 12, 64),
    ModelShape("GPT-3-350M", 350e6, 24, 1024, 16, 16, 64),
    ModelShape("Llama-3.2-1B", 1.24e9, 16, 2048, 32, 8, 64),
    ModelShape("Llama-3.2-3B", 3.21e9, 28, 3072, 24, 8, 128),
    ModelShape("Llama-3.1-8B", 8.03e9, 32, 4096, 32, 8, 128),
    ModelShape("Llama-2-13B", 13.0e9, 40, 5120, 40, 40, 128),
    ModelShape("Qwen2.5-32B", 32.8e9, 64, 5120, 40, 8, 128),
    ModelShape("Llama-3.1-70B", 70.6e9, 80, 8192, 64, 8, 128),
    ModelShape("Llama-3.1-405B", 405.9e9, 126, 16384, 128, 8, 128),
)


def shape_for_params(params: float) -> ModelShape:
    """The reference architecture nearest to `params` (log distance)."""
    _check_params(params)
    return min(REFERENCE_SHAPES, key=lambda s: abs(math.log(s.params / params)))
