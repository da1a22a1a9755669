"""The DeepSpeed config generated from a blueprint's training.model, and the job that passes it."""

from __future__ import annotations

import json

import pytest

from mlstack.cli import main
from mlstack.config import load
from mlstack.errors import InputError
from mlstack.k8s.job import SHIPPED_SCRIPT, render_job
from mlstack.workloads.deepspeed_config import deepspeed_config
from mlstack.workloads.resilience import CHECKPOINT_EVERY, KEEP_CHECKPOINTS, LAUNCHER


def test_stage_and_precision_map_to_zero_and_mixed_precision_sections() -> None:
    cfg = deepspeed_config(zero_stage=3, precision="bf16")
    assert cfg["zero_optimization"] == {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_gather_16bit_weights_on_model_save": True,
    }
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    fp16 = deepspeed_config(zero_stage=1, precision="fp16")
    assert fp16["zero_optimization"] == {"stage": 1}
    assert fp16["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    assert "train_batch_size" not in fp16  # derived by DeepSpeed from the world size: fits any node count


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zero_stage": 4, "precision": "bf16"}, "zero_stage 4 is not a ZeRO stage"),
        ({"zero_stage": 2, "precision": "int8"}, "precision 'int8' is not supported"),
        ({"zero_stage": 2, "precision": "bf16", "micro_batch_per_gpu": 0}, "must be at least 1"),
    ],
)
def test_bad_values_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        deepspeed_config(**kwargs)  # type: ignore[arg-type]


def test_shipped_job_runs_the_reference_script_with_the_blueprints_zero_config_and_checkpoints_on_fsx() -> None:
    config = load("eks-gpu-training")
    runtime, _ = render_job(config)
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    cmd = container["command"]
    assert cmd[:4] == ["python", LAUNCHER, "--nproc-per-node=8", SHIPPED_SCRIPT]
    assert cmd[4:11] == [
        "--checkpoint-dir", "/fsx/checkpoints/llm-pretrain", "--checkpoint-every", str(CHECKPOINT_EVERY),
        "--keep-checkpoints", str(KEEP_CHECKPOINTS), "--resume",
    ]  # fmt: skip
    assert cmd[11:14] == ["--strategy", "deepspeed", "--deepspeed-config"]
    assert config.training is not None and config.training.model is not None
    assert json.loads(cmd[14]) == deepspeed_config(zero_stage=config.training.model.zero_stage, precision="bf16")


def test_a_users_own_script_gets_no_reference_flags() -> None:
    config = load("eks-gpu-training")
    assert config.training is not None
    job = config.training.job.model_copy(update={"script": "/fsx/code/mine.py"})
    own = config.model_copy(update={"training": config.training.model_copy(update={"job": job})})
    runtime, _ = render_job(own)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == ["torchrun", "--nproc-per-node=8", "/fsx/code/mine.py"]


def test_cli_prints_the_config_and_refuses_a_blueprint_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deepspeed-config", "eks-p4d-training"]) == 0
    assert json.loads(capsys.readouterr().out)["zero_optimization"]["stage"] == 3
    assert main(["deepspeed-config", "eks-trn1-training"]) == 2
    assert "no training.model section" in capsys.readouterr().err
