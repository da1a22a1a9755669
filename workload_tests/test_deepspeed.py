"""DeepSpeed's own config classes accept the config mlstack generates from each blueprint's model section."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DS_BUILD_OPS", "0")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from deepspeed.runtime.config import DeepSpeedConfig

from mlstack.config import load
from mlstack.workloads.deepspeed_config import deepspeed_config


@pytest.mark.parametrize("blueprint", ["eks-gpu-training", "eks-p4d-training", "eks-g6e-training"])
def test_blueprint_zero_config_parses_with_the_stage_and_precision_the_memory_model_used(blueprint: str) -> None:
    model = load(blueprint).training.model  # type: ignore[union-attr]
    assert model is not None
    ds = DeepSpeedConfig(deepspeed_config(zero_stage=model.zero_stage, precision=model.precision))
    assert ds.zero_optimization_stage == model.zero_stage
    assert ds.bfloat16_config.enabled is (model.precision == "bf16")
    assert ds.float16_config.enabled is False
    assert ds.zero_config.gather_16bit_weights_on_model_save is True  # our key reached its field (default False)
    # One process here: DeepSpeed derives the global batch as micro batch x accumulation x world size.
    assert (ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps, ds.train_batch_size) == (1, 1, 1)
    assert ds.gradient_clipping == 1.0


@pytest.mark.parametrize(("stage", "precision"), [(0, "fp32"), (1, "fp16"), (2, "bf16"), (3, "fp16")])
def test_every_stage_and_precision_parses(stage: int, precision: str) -> None:
    ds = DeepSpeedConfig(deepspeed_config(zero_stage=stage, precision=precision))  # type: ignore[arg-type]
    assert ds.zero_optimization_stage == stage
    assert ds.float16_config.enabled is (precision == "fp16")
    assert ds.bfloat16_config.enabled is (precision == "bf16")
    assert ds.zero_config.overlap_comm is (stage >= 2)
