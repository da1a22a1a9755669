"""DeepSpeed ZeRO config from the blueprint's `training.model` section.

The same `zero_stage` and `precision` that the memory model sizes the cluster with (mlstack.catalog.memory)
become the DeepSpeed config the reference script trains with, so the plan and the job cannot disagree.
Keys follow the DeepSpeed configuration reference (https://www.deepspeed.ai/docs/config-json/).
"""

from __future__ import annotations

from typing import Any, Literal

from mlstack.errors import InputError

Precision = Literal["bf16", "fp16", "fp32"]


def deepspeed_config(
    *,
    zero_stage: int,
    precision: Precision,
    micro_batch_per_gpu: int = 1,
    gradient_accumulation_steps: int = 1,
    gradient_clipping: float = 1.0,
) -> dict[str, Any]:
    """A DeepSpeed config dict (JSON-serializable) for ZeRO `zero_stage` at `precision`.

    The global batch is left for DeepSpeed to derive (micro batch x accumulation x data-parallel ranks), so the
    same config fits any node count.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise InputError(f"zero_stage {zero_stage} is not a ZeRO stage; use 0, 1, 2 or 3")
    if precision not in ("bf16", "fp16", "fp32"):
        raise InputError(f"precision {precision!r} is not supported; use bf16, fp16 or fp32")
    if micro_batch_per_gpu < 1 or gradient_accumulation_steps < 1:
        raise InputError("micro_batch_per_gpu and gradient_accumulation_steps must be at least 1")
    zero: dict[str, Any] = {"stage": zero_stage}
    if zero_stage >= 2:
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if zero_stage == 3:
        # Gather full weights on save, so a checkpoint is usable without DeepSpeed (zero_to_fp32 not needed).
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_per_gpu,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_clipping": gradient_clipping,
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16"},
        # null, not 0: DeepSpeed skips its progress line only for None; 0 is a modulo by zero at the first step
        # (runtime/engine.py `_take_model_step` in DeepSpeed 0.19). train.py logs its own line per step.
        "steps_per_print": None,
        "wall_clock_breakdown": False,
    }
    if precision == "fp16":
        config["fp16"].update(loss_scale=0, initial_scale_power=16)  # dynamic loss scaling
    return config
