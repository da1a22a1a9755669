"""Inference advisor: TP degree x replicas per instance, latency targets, $ per million output tokens."""

from __future__ import annotations

import json

import pytest

from mlstack.catalog.advisor import Option, advise_infer
from mlstack.catalog.infer_advisor import INF1_CUT
from mlstack.catalog.instances import get_instance
from mlstack.catalog.serving_model import Efficiency, ServingHardware, estimate_serving, kv_bytes_per_token
from mlstack.cli import main

ISSUE = {"context": 4096, "output_tokens": 512, "concurrency": 32, "tpot_ms": 50.0}


def by_name(options: tuple[Option, ...], name: str) -> Option:
    (found,) = [o for o in options if o.instance.name == name]
    return found


def test_estimate_worked_example() -> None:
    # 8e9 params bf16 on 2 devices of 1000 GB/s, 100 TFLOPS; efficiency 0.5 / 0.5; KV 1e5 B/token;
    # context 1000, output 100, concurrency 4
    hw = ServingHardware("nvidia-gpu", 1000.0, 100.0, None)
    eff = Efficiency(bandwidth=0.5, compute=0.5, calibrated_on=("x",), note="n")
    est = estimate_serving(
        params=8e9,
        weight_bytes=2.0,
        kv_token_bytes=1e5,
        precision="bf16",
        context=1000,
        output_tokens=100,
        concurrency=4,
        devices=2,
        hardware=hw,
        efficiency=eff,
    )
    prefill = 2 * 8e9 * 1000 / (2 * 100e12 * 0.5)  # 0.16 s
    step_mem = (16e9 + 1e5 * 1050 * 4) / (2 * 1000e9 * 0.5)  # 16.42 ms
    step_flops = 2 * 8e9 * 4 / (2 * 100e12 * 0.5)  # 0.64 ms
    assert est.prefill_s == pytest.approx(prefill)
    assert est.step_s == pytest.approx(max(step_mem, step_flops)) and est.bound == "memory"
    assert est.ttft_s == pytest.approx(prefill + step_mem)
    assert est.tpot_s == pytest.approx(step_mem + 3 * prefill / 100)
    assert est.output_tokens_per_s == pytest.approx(4 * 100 / (4 * prefill + 100 * step_mem))
    # FP8 weights use the FP8 rate where the device has one
    fp8 = ServingHardware("nvidia-gpu", 1000.0, 100.0, 200.0)
    assert fp8.peak_tflops("fp8") == 200.0 and fp8.peak_tflops("int8") == 100.0 and hw.peak_tflops("fp8") == 100.0


def test_kv_bytes_per_token_llama_8b() -> None:
    assert kv_bytes_per_token(32, 8, 128, 2.0) == 131_072  # 2 x 32 x 8 x 128 x 2 B


def test_inf1_is_cut_for_decoder_llms() -> None:
    advice = advise_infer(8e9, **ISSUE)  # type: ignore[arg-type]
    for name in ("inf1.xlarge", "inf1.24xlarge"):
        assert by_name(advice.cut, name).reason == INF1_CUT
    assert "NeuronCore-v2" in INF1_CUT
    # even a model that would fit inf1's memory
    assert by_name(advise_infer(125e6).cut, "inf1.xlarge").reason == INF1_CUT


def test_issue_example_ranks_by_usd_per_million_tokens_within_target() -> None:
    advice = advise_infer(8e9, **ISSUE)  # type: ignore[arg-type]
    chosen = advice.chosen
    assert chosen
    for o in chosen:
        assert o.serving is not None and o.serving.tpot_s * 1e3 <= 50
        assert o.reason.startswith("fits")
    priced = [o.usd_per_million_output_tokens for o in chosen if o.usd_per_million_output_tokens is not None]
    assert priced and priced == sorted(priced)
    first_unpriced = next(i for i, o in enumerate(chosen) if o.usd_per_million_output_tokens is None)
    assert all(o.usd_per_million_output_tokens is None for o in chosen[first_unpriced:])
    top = chosen[0]
    assert top.price_per_hour is not None and top.output_tokens_per_s is not None
    assert top.usd_per_million_output_tokens == pytest.approx(
        top.price_per_hour / (top.output_tokens_per_s * 3600) * 1e6
    )
    # a single L40S (g6e.xlarge) is too slow for 32 sequences at 50 ms per token: cut with the estimate
    slow = by_name(advice.cut, "g6e.xlarge")
    assert slow.reason.startswith("cut: misses the latency target") and "--tpot-ms 50" in slow.reason
    # B300: no bandwidth figure, the target cannot be checked
    assert "cannot check the target" in by_name(advice.cut, "p6-b300.48xlarge").reason
    # without a target the B300 is served, with no estimate, after the estimated ones
    free = advise_infer(8e9, context=4096, output_tokens=512, concurrency=32)
    b300 = by_name(free.chosen, "p6-b300.48xlarge")
    assert b300.serving is None and "throughput unknown" in b300.reason


def test_tp_degree_and_replicas_on_a_multi_gpu_node() -> None:
    advice = advise_infer(8e9, **ISSUE)  # type: ignore[arg-type]
    p5 = by_name(advice.options, "p5.48xlarge")
    assert p5.serving is not None
    # memory-bound: every degree gives the same tokens/s per node; the smallest one meeting the target wins
    assert p5.serving.tensor_parallel == 1 and p5.replicas == 8
    assert p5.output_tokens_per_s == pytest.approx(8 * p5.serving.output_tokens_per_s)
    # a single A10G holds neither the weights nor the cache: g5.48xlarge needs TP >= 2 and meets 50 ms at TP4
    g5 = by_name(advice.options, "g5.48xlarge")
    assert g5.serving is not None and g5.serving.tensor_parallel == 4 and g5.replicas == 2
    assert "TP2 TPOT" in g5.reason and "(misses target)" in g5.reason


def test_ttft_target_cuts() -> None:
    loose = advise_infer(8e9, context=4096, output_tokens=512, concurrency=32)
    tight = advise_infer(8e9, context=4096, output_tokens=512, concurrency=32, ttft_ms=100)
    assert len(tight.chosen) < len(loose.chosen)
    assert all(o.serving is not None and o.serving.ttft_s * 1e3 <= 100 for o in tight.chosen)
    assert any("TTFT" in o.reason and "--ttft-ms 100" in o.reason for o in tight.cut)
    # CPU hosts have no estimate: a target cuts them
    tiny = advise_infer(125e6, tpot_ms=1000)
    assert "cannot check the latency target" in by_name(tiny.cut, "m7i.large").reason


def test_json_has_serving_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "advise",
        "--task",
        "infer",
        "--params",
        "8e9",
        "--context",
        "4096",
        "--output-tokens",
        "512",
        "--concurrency",
        "32",
        "--tpot-ms",
        "50",
        "--json",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"]["output_tokens"] == 512 and data["inputs"]["tpot_ms"] == 50
    first = data["chosen"][0]
    keys = {
        "instance_type",
        "nodes",
        "tensor_parallel",
        "ttft_ms",
        "tpot_ms",
        "output_tokens_per_s",
        "usd_per_million_output_tokens",
        "price_per_hour",
        "reason",
        "accelerators",
        "efa_gbps_per_node",
    }
    assert keys <= set(first)
    assert first["tpot_ms"] <= 50 and first["usd_per_million_output_tokens"] > 0
    assert first["output_tokens_per_s"] == pytest.approx(
        first["replicas_per_node"] * first["serving"]["replica_output_tokens_per_s"]
    )
    inf1 = next(o for o in data["cut"] if o["instance_type"] == "inf1.xlarge")
    assert inf1["tensor_parallel"] is None and "decoder LLMs" in inf1["reason"]


def test_issue_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "advise",
        "--task",
        "infer",
        "--params",
        "8e9",
        "--context",
        "4096",
        "--output-tokens",
        "512",
        "--concurrency",
        "32",
        "--tpot-ms",
        "50",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("#"))
    for column in ("TP x replicas", "out tok/s", "TTFT ms", "TPOT ms", "$/h (all nodes)", "$/1M out tok"):
        assert column in header
    first = next(line for line in out.splitlines() if line.lstrip().startswith("1 "))
    assert get_instance(first.split()[1]).accelerator is not None and "TP" in first
    assert "no price known (not estimated): p5e.48xlarge" in out  # unpriced options are named
    assert "options cut (--all shows each with its reason)" in out


def test_unpriced_options_rank_by_tokens_per_s_then_those_without_estimate() -> None:
    advice = advise_infer(405e9, concurrency=8)
    # priced options first by $/1M output tokens, then unpriced ones by tokens/s, then those without an estimate
    priced = [o for o in advice.chosen if o.usd_per_million_output_tokens is not None]
    assert [o.instance.name for o in priced] == ["p6-b200.48xlarge", "p5en.48xlarge"]
    rest = advice.chosen[len(priced) :]
    rates = [o.output_tokens_per_s for o in rest]
    first_unknown = rates.index(None)
    known = [r for r in rates[:first_unknown] if r is not None]
    assert known and known == sorted(known, reverse=True)
    assert all(r is None for r in rates[first_unknown:])
    assert rest[first_unknown].instance.name == "p6-b300.48xlarge"
