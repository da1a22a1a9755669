"""One model-fit estimate: `mlstack advise train`, `mlstack plan` and the synth-time warning agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlstack.catalog.advisor import advise_train
from mlstack.catalog.fit import TRAIN_PRECISIONS, training_fit
from mlstack.catalog.memory import shape_for_params
from mlstack.catalog.parallel import Layout, estimate_layout
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig, load
from mlstack.design.training import memory_warnings
from mlstack.plan import build_plan

SHIPPED_WITH_A_MODEL = sorted(
    p.stem for p in BLUEPRINTS_DIR.glob("*.yaml") if (c := load(p)).training is not None and c.training.model
)


def _groups(config: BlueprintConfig) -> list[tuple[str, str, int, int, float]]:
    """(group, instance, nodes the model is sharded over, devices, device GiB) per accelerated node group."""
    training = config.training
    assert training is not None
    out = []
    for group in training.node_groups:
        acc = group.instance.accelerator
        if acc is None:
            continue
        nodes = group.max_size
        if group.name == training.job_group.name and training.job.nodes is not None:
            nodes = training.job.nodes
        out.append((group.name, group.instance_type, nodes, acc.count * nodes, acc.memory_gib))
    return out


def test_shipped_training_blueprints_with_a_model_are_checked() -> None:
    # The parametrized check below must not run empty: the EKS blueprints at least carry a model.
    assert {"eks-g6e-training", "eks-gpu-training", "eks-p4d-training"} <= set(SHIPPED_WITH_A_MODEL)


@pytest.mark.parametrize("name", SHIPPED_WITH_A_MODEL)
def test_advisor_and_plan_agree_for_shipped_blueprints(name: str) -> None:
    config = load(BLUEPRINTS_DIR / f"{name}.yaml")
    assert config.training is not None and config.training.model is not None
    model = config.training.model
    plan_warnings = [w for w in build_plan(config).warnings if "per accelerator across" in w]
    assert plan_warnings == memory_warnings(config.training)  # the synth warning is the plan's
    param_bytes, grad_bytes, k = TRAIN_PRECISIONS[model.precision]
    shape = shape_for_params(model.params)
    for group, instance, nodes, devices, gib in _groups(config):
        fit = training_fit(
            model.params, devices, device_memory_gib=gib, precision=model.precision, zero_stage=model.zero_stage
        )
        # The plan warns exactly when the shared fit says no.
        assert fit.fits == (not any(f"node group {group!r}" in w for w in plan_warnings)), group
        # The advisor's estimate of the same layout (pure data parallel over the same devices) is the same number.
        advisor_dp = estimate_layout(
            Layout(1, 1, devices),
            params=model.params,
            shape=shape,
            zero_stage=model.zero_stage,
            param_bytes=param_bytes,
            grad_bytes=grad_bytes,
            optimizer_multiplier=k,
            seq_len=4096,
            micro_batch=1,
            global_batch_tokens=4 * 2**20,
            devices_per_node=devices // nodes,
            peak_tflops=100.0,
            mfu=0.4,
            intra_gbps=450.0,
            efa_gbps_per_node=3200.0,
        )
        assert advisor_dp.total_bytes == fit.memory.total_bytes
        # And the advisor, given the blueprint's model and at most its nodes, finds this instance type fits.
        advice = advise_train(model.params, precision=model.precision, zero_stage=model.zero_stage, max_nodes=nodes)
        (option,) = [o for o in advice.options if o.instance.name == instance]
        assert option.chosen == fit.fits, (group, option.reason)  # no budget: chosen means fits
        assert option.nodes <= nodes and option.usable_bytes_per_device == pytest.approx(fit.usable_gib * 2**30)


def test_advisor_and_plan_agree_when_the_model_does_not_fit(tmp_path: Path) -> None:
    # 70B, ZeRO-3 on one p5 node (8 H100): 130 GiB of states per device. The plan warns; the advisor, held to one
    # node, finds no layout (tensor parallelism does not shrink ZeRO-3 states further) and cuts p5.48xlarge.
    text = (BLUEPRINTS_DIR / "eks-gpu-training.yaml").read_text()
    path = tmp_path / "one-node.yaml"
    path.write_text(text.replace("    nodes: 4\n", "    nodes: 1\n"))
    config = load(path)
    assert config.training is not None and config.training.job.nodes == 1
    (warning,) = memory_warnings(config.training)
    assert "across 8 devices" in warning
    (p5,) = [o for o in advise_train(70e9, zero_stage=3, max_nodes=1).options if o.instance.name == "p5.48xlarge"]
    assert not p5.chosen and p5.reason.startswith("cut: does not fit in 1 node(s)")
