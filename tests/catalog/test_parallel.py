"""TP x PP x DP: per-device memory against a published breakdown, communication per step, the advisor's layout."""

from __future__ import annotations

import pytest

from mlstack.catalog.advisor import Option, advise_train
from mlstack.catalog.memory import shape_for_params
from mlstack.catalog.parallel import Layout, LayoutEstimate, choose_layout, estimate_layout, layouts

LLAMA_405B = shape_for_params(405e9)
LLAMA_70B = shape_for_params(70e9)


def est(
    layout: Layout,
    params: float = 405e9,
    *,
    zero: int = 1,
    pb: float = 2,
    gb: float = 2,
    k: float = 12,
    efa: float = 3200.0,
    per_node: int = 8,
) -> LayoutEstimate:
    return estimate_layout(
        layout,
        params=params,
        shape=shape_for_params(params),
        zero_stage=zero,
        param_bytes=pb,
        grad_bytes=gb,
        optimizer_multiplier=k,
        seq_len=4096,
        micro_batch=1,
        global_batch_tokens=4 * 2**20,
        devices_per_node=per_node,
        peak_tflops=989.4,
        mfu=0.4,
        intra_gbps=450.0,
        efa_gbps_per_node=efa,
    )


@pytest.mark.parametrize(
    ("pb", "gb", "k", "per_param"), [(2, 2, 16, lambda d: 4 + 16 / d), (2, 4, 12, lambda d: 6 + 12 / d)]
)
@pytest.mark.parametrize("dp", [1, 4, 64])
def test_model_states_match_megatron_distributed_optimizer(
    pb: float, gb: float, k: float, per_param: object, dp: int
) -> None:
    # Published breakdown: NVIDIA Megatron-LM README, "Distributed Optimizer": bytes per parameter with the
    # distributed optimizer (ZeRO-1 over d data-parallel ranks) are 4 + 16/d for fp16 params and grads and
    # 6 + 12/d for bf16 params with fp32 grads; each device holds params / (TP x PP) of the model.
    e = est(Layout(8, 16, dp), pb=pb, gb=gb, k=k)
    assert callable(per_param)
    assert e.states_bytes == pytest.approx(405e9 / (8 * 16) * per_param(dp))


def test_activations_shrink_with_tensor_and_sequence_parallelism() -> None:
    # Korthikanti et al. 2022: full recomputation keeps 2sbh bytes per layer, divided by t with sequence parallelism,
    # plus one layer recomputed (34sbh/t with flash attention); 1F1B keeps L layers' worth at any PP degree.
    s, h, layers = 4096, LLAMA_405B.hidden, LLAMA_405B.layers
    for tp in (1, 8):
        expected = layers * 2 * s * h / tp + 34 * s * h / tp
        assert est(Layout(tp, 16, 1)).activations_bytes == pytest.approx(expected)
        assert est(Layout(tp, 4, 4)).activations_bytes == pytest.approx(expected)


def test_communication_volume_per_step() -> None:
    e = est(Layout(8, 16, 4), zero=1)
    m = 4 * 2**20 // (4096 * 4)
    assert e.micro_batches == m
    sbh2 = 4096 * LLAMA_405B.hidden * 2
    assert e.tp_bytes == pytest.approx(8 * 7 / 8 * sbh2 * LLAMA_405B.layers / 16 * m)
    assert e.pp_bytes == pytest.approx(2 * sbh2 / 8 * m)
    assert e.dp_bytes == pytest.approx(2 * 3 / 4 * 405e9 / 128 * 2)
    # ZeRO-3 re-gathers parameters for forward and backward of every micro-batch
    z3 = est(Layout(8, 16, 4), zero=3)
    assert z3.dp_bytes == pytest.approx((2 * m + 1) * 3 / 4 * 405e9 / 128 * 2)
    # links: TP in the node; PP across nodes; DP over EFA once the TP x DP group outgrows a node
    assert e.pp_over_efa and e.dp_over_efa
    assert not est(Layout(2, 16, 4)).dp_over_efa


def test_efa_bandwidth_changes_the_step_time() -> None:
    fast = est(Layout(8, 1, 16), params=70e9, zero=3, efa=3200.0)
    slow = est(Layout(8, 1, 16), params=70e9, zero=3, efa=400.0)
    assert slow.efa_exposed_s > fast.efa_exposed_s > 0 and slow.step_s > fast.step_s
    # ZeRO-1 sends the shard twice per step: its DP traffic hides behind compute even on 400 Gbps
    assert est(Layout(8, 1, 16), params=70e9, zero=1, efa=400.0).efa_exposed_s == 0


def test_layouts_keep_tp_inside_a_node() -> None:
    found = layouts(8, 16, LLAMA_405B)
    assert all(lay.tp <= 8 and lay.devices == 128 for lay in found)
    assert Layout(8, 16, 1) in found and Layout(16, 8, 1) not in found


def test_choose_layout_none_when_nothing_fits() -> None:
    assert choose_layout([est(Layout(8, 1, 1))], 80 * 2**30) is None


def by_name(options: tuple[Option, ...], name: str) -> Option:
    (found,) = [o for o in options if o.instance.name == name]
    return found


def test_advisor_layout_for_70b() -> None:
    p5 = by_name(advise_train(70e9, tokens=1e12, pricing="capacity_block").chosen, "p5.48xlarge")
    assert p5.layout is not None
    lay = p5.layout.layout
    # ZeRO-1 data parallelism alone needs 4 + 12/16 bytes/param = 332 GB per device on 16 H100: model parallelism
    assert p5.nodes == 2 and lay.devices == 16 and lay.tp * lay.pp > 1 and lay.tp <= 8
    pure_dp = est(Layout(1, 1, 16), params=70.6e9)
    assert pure_dp.total_bytes > 80 * 2**30
    assert p5.layout.pp_over_efa and "TP in-node over NVLink" in p5.reason and "PP over EFA" in p5.reason


def test_advisor_layout_for_405b() -> None:
    advice = advise_train(405e9, tokens=15.6e12, pricing="capacity_block")
    p5 = by_name(advice.chosen, "p5.48xlarge")
    assert p5.layout is not None
    lay = p5.layout.layout
    # Llama 3 trained 405B with TP8 PP16 on H100; the advisor also splits over both TP (in the node) and PP
    assert p5.nodes == 16 and lay.devices == 128 and lay.tp >= 4 and lay.pp >= 8
    assert p5.used_bytes_per_device is not None and p5.used_bytes_per_device <= 0.85 * 80 * 2**30
    assert est(Layout(8, 1, 16)).total_bytes > 80 * 2**30  # TP alone leaves 101 GB of bf16 weights+grads
    assert p5.utilisation is not None and p5.utilisation.row.id == "llama3-405b-h100-16k"
    assert p5.est_cost == pytest.approx(p5.est_hours * 39.33 * 16)  # type: ignore[operator]


def test_efa_bandwidth_matters_in_the_ranking() -> None:
    advice = advise_train(70e9, tokens=1e12)
    trn1, trn1n = by_name(advice.chosen, "trn1.32xlarge"), by_name(advice.chosen, "trn1n.32xlarge")
    assert trn1.layout is not None and trn1n.layout is not None
    assert trn1.layout.layout == trn1n.layout.layout and trn1.nodes == trn1n.nodes
    assert trn1n.efa_gbps_per_node == 2 * trn1.efa_gbps_per_node
    assert trn1n.est_hours is not None and trn1.est_hours is not None and trn1n.est_hours < trn1.est_hours
