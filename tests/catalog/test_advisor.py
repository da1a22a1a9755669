"""Advisor: options fit with headroom, multi-node needs EFA, budgets cut, CPU hosts for tiny models."""

from __future__ import annotations

import json

import pytest

from mlstack.catalog.advisor import Option, advise_infer, advise_train, node_counts, training_memory
from mlstack.catalog.instances import get_instance
from mlstack.catalog.memory import GIB
from mlstack.errors import InputError


def names(options: tuple[Option, ...]) -> list[str]:
    return [o.instance.name for o in options]


def by_name(options: tuple[Option, ...], name: str) -> Option:
    (found,) = [o for o in options if o.instance.name == name]
    return found


def test_node_counts() -> None:
    assert node_counts(1) == [1]
    assert node_counts(64) == [1, 2, 4, 8, 16, 32, 64]
    assert node_counts(6) == [1, 2, 4, 6]


def test_7b_inference_fits_one_80gb_gpu() -> None:
    advice = advise_infer(7e9, precision="bf16", context=4096, concurrency=1)
    one_h100 = by_name(advice.options, "p5.4xlarge")
    assert one_h100.chosen and one_h100.nodes == 1 and one_h100.devices == 1
    # 14 GB weights + the KV cache of 4096 prompt + 256 generated tokens (the default --output-tokens; the cache
    # holds the generated tokens too) = 0.5 GiB x 4352/4096, on one 80 GiB H100 with 15% headroom
    assert one_h100.used_bytes_per_device == pytest.approx(14e9 + 2**29 * (4096 + 256) / 4096)
    assert one_h100.usable_bytes_per_device == pytest.approx(0.85 * 80 * GIB)
    # the dated post-June-2025 on-demand rate (tsaol/aws-gpu snapshot of 2026-01-21)
    assert one_h100.price_per_hour == 6.88 and one_h100.dated_price is not None
    assert one_h100.dated_price.as_of == "2026-01-21"


def test_every_chosen_option_fits_with_headroom() -> None:
    for advice in (advise_train(70e9), advise_infer(70e9, context=8192, concurrency=16)):
        assert advice.chosen
        for o in advice.chosen:
            assert o.used_bytes_per_device is not None and o.usable_bytes_per_device is not None
            assert o.used_bytes_per_device <= o.usable_bytes_per_device
            assert o.reason.startswith("fits")


def test_70b_training_needs_multiple_nodes_and_efa() -> None:
    advice = advise_train(70e9, tokens=1e12)
    p5 = by_name(advice.chosen, "p5.48xlarge")
    assert p5.nodes > 1
    multi = [o for o in advice.chosen if o.nodes > 1]
    assert multi
    assert all(o.instance.efa_supported and o.efa_gbps_per_node > 0 for o in multi)
    # 16 x 70e9 bytes of model states never fit one 8x80 GiB node
    assert all(o.nodes > 1 for o in advice.chosen if o.instance.total_accelerator_memory_gib <= 640)
    cut_no_efa = [o for o in advice.cut if o.reason.startswith("cut: no EFA for multi-node")]
    assert cut_no_efa and all(not o.instance.efa_supported for o in cut_no_efa)
    assert "g5.xlarge" in names(tuple(cut_no_efa))


def test_training_time_and_cost_estimate() -> None:
    advice = advise_train(70e9, tokens=1e12, mfu=0.4, pricing="capacity_block")
    p5 = by_name(advice.chosen, "p5.48xlarge")
    assert p5.layout is not None and p5.utilisation is not None
    devices = p5.nodes * 8
    # given MFU, the published runs' goodput at 70B (inside the Llama 3 70B model card's GPU-hours: 1.0), plus EFA
    # time not hidden
    assert p5.utilisation.goodput == pytest.approx(1.0)
    hours = 6 * 70e9 * 1e12 / (devices * 989.4e12 * 0.4 * 1.0) / 3600
    hours *= 1 + p5.layout.efa_exposed_s / p5.layout.compute_s
    assert p5.est_hours == pytest.approx(hours)
    assert p5.est_cost == pytest.approx(hours * 39.33 * p5.nodes)  # Capacity Block effective rate, us-east-1
    # ranked by estimated cost: priced options first, in ascending cost
    costs = [o.est_cost for o in advice.chosen if o.est_cost is not None and not o.demoted]
    assert costs == sorted(costs)


def test_g_series_multi_node_training_ranked_last() -> None:
    advice = advise_train(70e9)
    demoted = [o for o in advice.chosen if o.demoted]
    assert demoted and all(o.instance.family.startswith("g") for o in demoted)
    first_demoted = advice.chosen.index(demoted[0])
    assert all(o.demoted for o in advice.chosen[first_demoted:])


def test_inferentia_and_cpu_are_not_training_options() -> None:
    advice = advise_train(1e8)
    assert by_name(advice.cut, "inf2.48xlarge").reason == "cut: Inferentia is an inference accelerator"
    assert by_name(advice.cut, "c7i.48xlarge").reason.startswith("cut: CPU host")
    assert "trn1.2xlarge" in names(advice.chosen)


def test_budget_cuts_options() -> None:
    free = advise_train(70e9, max_nodes=16)
    tight = advise_train(70e9, max_nodes=16, budget_per_hour=50)
    assert len(tight.chosen) < len(free.chosen)
    assert all(o.price_per_hour is not None and o.price_per_hour <= 50 for o in tight.chosen)
    # the dated post-June-2025 P5 rate: 2 nodes x $55.04/h is over a $50/h budget
    assert by_name(tight.cut, "p5.48xlarge").reason.startswith("cut: over budget ($110.08/h for 2 node(s)")
    over = [o for o in tight.cut if o.reason.startswith("cut: over budget")]
    assert over and all(o.price_per_hour is not None and o.price_per_hour > 50 for o in over)
    assert by_name(tight.cut, "p5e.48xlarge").reason.startswith("cut: price unknown")


def test_max_nodes_cuts_large_models() -> None:
    advice = advise_train(405e9, max_nodes=2)
    assert by_name(advice.cut, "p5.48xlarge").reason.startswith("cut: does not fit in 2 node(s)")


def test_405b_training_and_serving() -> None:
    train = advise_train(405e9)
    assert train.chosen and all(o.nodes > 1 for o in train.chosen if o.instance.name == "p5.48xlarge")
    infer = advise_infer(405e9, context=8192, concurrency=16)
    # single nodes that hold it: p5en and p6-b200 have dated us-east-1 rates, p6-b300 none in us-east-1
    assert {"p5en.48xlarge", "p6-b300.48xlarge"} <= set(names(infer.chosen))
    assert by_name(infer.chosen, "p5en.48xlarge").price_per_hour == 63.296
    assert by_name(infer.chosen, "p6-b300.48xlarge").price_per_hour is None
    p5 = by_name(infer.cut, "p5.48xlarge")  # 2 nodes would work, but single-node options exist
    assert p5.nodes == 2 and "single-node options fit" in p5.reason


def test_cpu_hosts_appear_for_a_tiny_model() -> None:
    advice = advise_infer(125e6, context=2048, concurrency=4)
    cpu = [o for o in advice.chosen if o.instance.accelerator is None]
    assert {"c7i.xlarge", "m7i.large", "c7g.xlarge", "c8g.xlarge"} <= set(names(tuple(cpu)))
    amx = by_name(advice.chosen, "m7i.large")
    assert "Intel AMX" in amx.reason and amx.describe_accelerators() == "CPU 2 vCPU 8GiB (AMX)"
    assert "Graviton" in by_name(advice.chosen, "c8g.xlarge").reason
    # ranked by $ per million output tokens: CPU hosts have no throughput estimate (no bandwidth figure) and no
    # dated price (the snapshots that list them are undated), so they come after every option with an estimate
    first_cpu = next(i for i, o in enumerate(advice.chosen) if o.instance.accelerator is None)
    assert all(o.instance.accelerator is None for o in advice.chosen[first_cpu:])
    assert all(o.price_per_hour is None for o in cpu)


def test_cpu_hosts_cut_for_large_models() -> None:
    advice = advise_infer(7e9)
    assert by_name(advice.cut, "m7i.48xlarge").reason == "cut: CPU hosts only for models <= 3e+09 params"


def test_inferentia_and_trainium_serve() -> None:
    advice = advise_infer(7e9, context=4096, concurrency=1)
    inf2 = by_name(advice.chosen, "inf2.xlarge")
    assert "Neuron" in inf2.reason
    assert "trn1.2xlarge" in names(advice.chosen)


def test_json_round_trip() -> None:
    data = advise_train(7e9, tokens=1e11).to_json()
    text = json.dumps(data)
    assert json.loads(text)["task"] == "train"
    assert data["chosen"] and data["cut"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": -1}, "--params must be positive"),
        ({"params": 1e15}, "absurd"),
        ({"params": 7e9, "max_nodes": 0}, "--max-nodes must be at least 1"),
        ({"params": 7e9, "budget_per_hour": 0}, "--budget-per-hour must be positive"),
        ({"params": 7e9, "headroom": 0.95}, "--headroom"),
        ({"params": 7e9, "tokens": -1}, "--tokens"),
        ({"params": 7e9, "mfu": 1.5}, "--mfu"),
        ({"params": 7e9, "zero_stage": 4}, "ZeRO stage"),
        ({"params": 7e9, "precision": "int4"}, "training precision"),
    ],
)
def test_train_input_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        advise_train(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": 0}, "--params must be positive"),
        ({"params": 7e9, "context": 0}, "--context"),
        ({"params": 7e9, "concurrency": 10**9}, "--concurrency"),
        ({"params": 7e9, "precision": "fp4"}, "unknown precision"),
    ],
)
def test_infer_input_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        advise_infer(**kwargs)  # type: ignore[arg-type]


def test_catalog_instance_lookup_used_by_advisor_is_consistent() -> None:
    advice = advise_infer(7e9)
    assert {o.instance for o in advice.options} == {get_instance(o.instance.name) for o in advice.options}
    assert len(advice.options) == len({o.instance.name for o in advice.options})


def test_training_memory_worked_example() -> None:
    # 70B, bf16 Adam, ZeRO-3 over 16 devices, Llama-3.1-70B shape (80 layers, hidden 8192), seq 4096, micro-batch 1:
    #   states      16 B x 70e9 / 16                          = 70e9
    #   activations 80 x 2sbh + sbh x 34 (one layer recomputed) = 80 x 67_108_864 + 1_140_850_688 = 6_509_559_808
    #   gather      2 layers x 2 B x 70e9 / 80                  = 3.5e9
    m = training_memory(70e9, 16, zero_stage=3)
    assert m.states.total_bytes == pytest.approx(70e9)
    assert m.activations_bytes == 6_509_559_808
    assert m.gather_bytes == pytest.approx(3.5e9)
    assert m.total_bytes == pytest.approx(80_009_559_808)
    assert training_memory(70e9, 16, zero_stage=2).gather_bytes == 0.0
    with pytest.raises(InputError, match="training precision"):
        training_memory(7e9, 8, precision="int8")
