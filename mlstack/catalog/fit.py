"""Does a model fit for training? The one memory estimate and fit rule used by the advisor, the plan and synth.

`mlstack advise train` ranks TP x PP x DP layouts, `mlstack plan` warns when the blueprint's model does not fit its
node groups, and the training stack repeats that warning at synth. All three estimate per-device memory with
`layout_memory` and decide with `TrainingFit.fits`, so they cannot disagree about the same layout.

Per-device memory of a layout with TP t x PP p x DP d devices:
- model states: the t·p-way model-parallel shard (params / (t·p)) under ZeRO over the d data-parallel replicas
  (`memory.model_state_memory`, Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models");
- activations: full activation checkpointing with flash attention and sequence parallelism over the TP group
  (`memory.activation_memory`, Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models"), for one micro-batch of `seq_len` tokens;
- ZeRO-3 adds two layers of gathered 16-bit weights of the TP shard (the layer being computed and the one being
  prefetched).

A layout fits when that total is at most (1 - headroom) of the device memory: the headroom covers what the estimate
leaves out (CUDA/Neuron runtime and allocator fragmentation, communication buffers, embeddings and output layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.catalog.memory import GIB, ModelShape, ModelStateMemory, activation_memory, model_state_memory
from mlstack.catalog.memory import shape_for_params as _shape
from mlstack.errors import InputError

__all__ = [
    "DEFAULT_HEADROOM",
    "DEFAULT_SEQ_LEN",
    "TRAIN_PRECISIONS",
    "TrainingFit",
    "TrainingMemory",
    "layout_memory",
    "train_precision",
    "training_fit",
    "training_memory",
    "usable_bytes",
]

TRAIN_PRECISIONS = {"bf16": (2.0, 2.0, 12.0), "fp16": (2.0, 2.0, 12.0), "fp32": (4.0, 4.0, 8.0)}
"""precision -> (param bytes, grad bytes, optimizer multiplier K): mixed-precision Adam K=12; pure fp32 Adam K=8."""
DEFAULT_HEADROOM = 0.15
"""Share of device memory kept free for what the estimate does not model (see the module doc)."""
DEFAULT_SEQ_LEN = 4096
DEFAULT_MICRO_BATCH = 1


def train_precision(precision: str) -> str:
    """The `TRAIN_PRECISIONS` key for `precision`, or an input error naming the choices."""
    key = precision.lower()
    if key not in TRAIN_PRECISIONS:
        raise InputError(
            f"training precision must be one of {', '.join(TRAIN_PRECISIONS)} (got {precision!r}); "
            "fp8/int training keeps bf16 master weights, model it as bf16"
        )
    return key


@dataclass(frozen=True)
class TrainingMemory:
    """Per-device training memory: model states + activations + ZeRO-3 gather buffers (bytes)."""

    states: ModelStateMemory
    activations_bytes: float
    gather_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.states.total_bytes + self.activations_bytes + self.gather_bytes


def layout_memory(
    params: float,
    *,
    shape: ModelShape,
    tensor_parallel: int,
    pipeline_parallel: int,
    data_parallel: int,
    zero_stage: int,
    param_bytes: float,
    grad_bytes: float,
    optimizer_multiplier: float,
    seq_len: int = DEFAULT_SEQ_LEN,
    micro_batch: int = DEFAULT_MICRO_BATCH,
) -> TrainingMemory:
    """Per-device bytes of one TP x PP x DP layout (see the module doc for each term)."""
    t, p = tensor_parallel, pipeline_parallel
    states = model_state_memory(
        params / (t * p),
        data_parallel,
        zero_stage,
        optimizer_multiplier=optimizer_multiplier,
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
    )
    acts = activation_memory(
        layers=shape.layers,
        hidden=shape.hidden,
        seq_len=seq_len,
        micro_batch=micro_batch,
        heads=shape.heads,
        tensor_parallel=t,
        sequence_parallel=True,
        checkpointing="full",
        flash_attention=True,
    ).total_bytes
    gather = 2 * param_bytes * params / (t * shape.layers) if zero_stage == 3 else 0.0
    return TrainingMemory(states=states, activations_bytes=acts, gather_bytes=gather)


def training_memory(
    params: float,
    devices: int,
    *,
    precision: str = "bf16",
    zero_stage: int = 3,
    seq_len: int = DEFAULT_SEQ_LEN,
    micro_batch: int = DEFAULT_MICRO_BATCH,
    shape: ModelShape | None = None,
) -> TrainingMemory:
    """Per-device bytes for pure data-parallel training (FSDP / ZeRO, TP = PP = 1) over `devices` accelerators."""
    param_bytes, grad_bytes, k = TRAIN_PRECISIONS[train_precision(precision)]
    return layout_memory(
        params,
        shape=shape or _shape(params),
        tensor_parallel=1,
        pipeline_parallel=1,
        data_parallel=devices,
        zero_stage=zero_stage,
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
        optimizer_multiplier=k,
        seq_len=seq_len,
        micro_batch=micro_batch,
    )


def usable_bytes(device_memory_gib: float, headroom: float = DEFAULT_HEADROOM) -> float:
    """Bytes of one device that a training layout may use."""
    return device_memory_gib * GIB * (1 - headroom)


@dataclass(frozen=True)
class TrainingFit:
    """A per-device memory estimate against one device's memory."""

    memory: TrainingMemory
    device_memory_gib: float
    headroom: float = DEFAULT_HEADROOM

    @property
    def need_gib(self) -> float:
        return self.memory.total_bytes / GIB

    @property
    def usable_gib(self) -> float:
        return usable_bytes(self.device_memory_gib, self.headroom) / GIB

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= usable_bytes(self.device_memory_gib, self.headroom)


def training_fit(
    params: float,
    devices: int,
    *,
    device_memory_gib: float,
    precision: str = "bf16",
    zero_stage: int = 3,
    headroom: float = DEFAULT_HEADROOM,
    seq_len: int = DEFAULT_SEQ_LEN,
    micro_batch: int = DEFAULT_MICRO_BATCH,
    shape: ModelShape | None = None,
) -> TrainingFit:
    """Whether data-parallel training (FSDP / ZeRO at `zero_stage`) over `devices` accelerators of
    `device_memory_gib` each fits; the advisor applies the same estimate and rule to TP x PP layouts too."""
    memory = training_memory(
        params,
        devices,
        precision=precision,
        zero_stage=zero_stage,
        seq_len=seq_len,
        micro_batch=micro_batch,
        shape=shape,
    )
    return TrainingFit(memory, device_memory_gib, headroom)
