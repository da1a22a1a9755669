"""Memory model against numbers worked out by hand, plus monotonicity properties."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlstack.catalog.memory import (
    FSDP_TO_ZERO,
    REFERENCE_SHAPES,
    activation_memory,
    inference_memory,
    kv_cache_bytes,
    model_state_memory,
    precision_bytes,
    shape_for_params,
    zero_stage_for_fsdp,
)
from mlstack.errors import InputError

GB = 1e9


class TestZeroPaperExample:
    """Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N = 64, K = 12."""

    PSI = 7.5e9
    N = 64

    def test_baseline_is_16_psi(self) -> None:
        m = model_state_memory(self.PSI, self.N, 0)
        # 2Ψ + 2Ψ + 12Ψ = 16 x 7.5e9 = 120e9
        assert m.parameters_bytes == 15e9
        assert m.gradients_bytes == 15e9
        assert m.optimizer_states_bytes == 90e9
        assert m.total_bytes == pytest.approx(120 * GB)

    def test_zero1_shards_optimizer_states(self) -> None:
        m = model_state_memory(self.PSI, self.N, 1)
        # 4Ψ + 12Ψ/64 = 30e9 + 1.40625e9 = 31.40625e9  (paper: 31.4 GB)
        assert m.optimizer_states_bytes == pytest.approx(1.40625e9)
        assert m.total_bytes == pytest.approx(31.40625 * GB)
        assert round(m.total_bytes / GB, 1) == 31.4

    def test_zero2_shards_gradients_too(self) -> None:
        m = model_state_memory(self.PSI, self.N, 2)
        # 2Ψ + 14Ψ/64 = 15e9 + 1.640625e9 = 16.640625e9  (paper: 16.6 GB)
        assert m.gradients_bytes == pytest.approx(0.234375e9)
        assert m.total_bytes == pytest.approx(16.640625 * GB)
        assert round(m.total_bytes / GB, 1) == 16.6

    def test_zero3_shards_everything(self) -> None:
        m = model_state_memory(self.PSI, self.N, 3)
        # 16Ψ/64 = 1.875e9  (paper: 1.9 GB)
        assert m.parameters_bytes == pytest.approx(0.234375e9)
        assert m.total_bytes == pytest.approx(1.875 * GB)
        assert round(m.total_bytes / GB, 1) == 1.9

    def test_json_has_bytes_and_gb(self) -> None:
        data = model_state_memory(self.PSI, self.N, 3).to_json()
        assert data["bytes_per_device"] == {
            "parameters": 234375000.0,
            "gradients": 234375000.0,
            "optimizer_states": 1406250000.0,
            "total": 1875000000.0,
        }
        assert data["gb_per_device"]["total"] == pytest.approx(1.875)  # type: ignore[index]


def test_optimizer_multiplier_is_configurable() -> None:
    # Pure fp32 Adam: 4Ψ params + 4Ψ grads + 8Ψ (momentum, variance), no sharding: 16 bytes/param as well.
    m = model_state_memory(1e9, 1, 0, optimizer_multiplier=8, param_bytes=4, grad_bytes=4)
    assert m.total_bytes == 16e9
    # K = 4 (e.g. a one-state optimizer kept in fp32), ZeRO-1 over 4: 2+2 + 4/4 = 5 bytes/param.
    assert model_state_memory(1e9, 4, 1, optimizer_multiplier=4).total_bytes == 5e9


def test_fsdp_strategies_map_onto_zero_stages() -> None:
    assert zero_stage_for_fsdp("NO_SHARD") == 0
    assert zero_stage_for_fsdp("shard_grad_op") == 2
    assert zero_stage_for_fsdp("FULL_SHARD") == 3
    assert set(FSDP_TO_ZERO) >= {"NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"}
    with pytest.raises(InputError, match="unknown FSDP sharding strategy 'ZERO4'"):
        zero_stage_for_fsdp("ZERO4")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": 0}, "must be positive"),
        ({"params": -5}, "must be positive"),
        ({"params": 2e14}, "absurd"),
        ({"params": 1e9, "devices": 0}, "device count must be a positive integer"),
        ({"params": 1e9, "zero_stage": 4}, "ZeRO stage must be 0, 1, 2 or 3"),
        ({"params": 1e9, "optimizer_multiplier": -1}, "optimizer multiplier"),
    ],
)
def test_model_state_input_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(InputError, match=message):
        model_state_memory(**kwargs)  # type: ignore[arg-type]


class TestActivations:
    """Korthikanti et al. 2022, Table 2, worked for s=2048, b=1, h=4096, a=32, L=32."""

    kw: ClassVar[dict[str, Any]] = {"layers": 32, "hidden": 4096, "seq_len": 2048, "micro_batch": 1, "heads": 32}

    def test_no_recomputation(self) -> None:
        # per layer sbh(34 + 5as/h) = 2048*4096*(34 + 5*32*2048/4096) = 8388608 * 114 = 956_301_312
        a = activation_memory(**self.kw, checkpointing="none")
        assert a.per_layer_bytes == 956_301_312
        assert a.total_bytes == 32 * 956_301_312

    def test_flash_attention_drops_score_term(self) -> None:
        a = activation_memory(**self.kw, checkpointing="none", flash_attention=True)
        assert a.per_layer_bytes == 8388608 * 34

    def test_full_checkpointing_keeps_layer_inputs(self) -> None:
        # 2sbh per layer = 16_777_216, x 32 layers, plus one un-checkpointed layer during its recomputation
        a = activation_memory(**self.kw, checkpointing="full")
        assert a.per_layer_bytes == 2 * 2048 * 4096
        assert a.total_bytes == 32 * 16_777_216 + 956_301_312

    def test_selective_recomputation(self) -> None:
        a = activation_memory(**self.kw, checkpointing="selective")
        assert a.total_bytes == 32 * 34 * 8388608

    def test_tensor_parallel_without_sequence_parallel(self) -> None:
        # sbh(10 + 24/t + 5as/(ht)) with t = 8: 8388608 * (10 + 3 + 80/8) = 8388608 * 23
        a = activation_memory(**self.kw, tensor_parallel=8, sequence_parallel=False, checkpointing="none")
        assert a.per_layer_bytes == 8388608 * 23

    def test_tensor_and_sequence_parallel_divide_by_t(self) -> None:
        a = activation_memory(**self.kw, tensor_parallel=8, checkpointing="none")
        assert a.per_layer_bytes == 956_301_312 / 8

    def test_bad_shapes(self) -> None:
        with pytest.raises(InputError, match="not divisible"):
            activation_memory(layers=2, hidden=100, seq_len=8, micro_batch=1, heads=3)
        with pytest.raises(InputError, match="sequence length must be a positive integer"):
            activation_memory(layers=2, hidden=64, seq_len=0, micro_batch=1, heads=4)
        with pytest.raises(InputError, match="checkpointing must be"):
            activation_memory(layers=2, hidden=64, seq_len=8, micro_batch=1, heads=4, checkpointing="half")  # type: ignore[arg-type]


def test_kv_cache_llama3_8b() -> None:
    # 2 x 32 layers x 8 KV heads x 128 x 8192 tokens x 1 x 2 bytes = 1 GiB exactly
    assert kv_cache_bytes(layers=32, kv_heads=8, head_dim=128, context=8192, batch=1) == 2**30
    assert kv_cache_bytes(layers=32, kv_heads=8, head_dim=128, context=8192, batch=16, bytes_per_element=1) == 2**33


def test_inference_memory_weights_plus_kv() -> None:
    m = inference_memory(7e9, precision="bf16", layers=32, kv_heads=8, head_dim=128, context=8192, batch=1)
    assert m.weights_bytes == 14e9
    assert m.total_bytes == 14e9 + 2**30
    assert inference_memory(
        7e9, precision="int4", layers=32, kv_heads=8, head_dim=128, context=8192, batch=1
    ).weights_bytes == pytest.approx(3.5e9)
    assert [precision_bytes(p) for p in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")] == [4, 2, 2, 1, 1, 0.5]
    with pytest.raises(InputError, match="unknown precision 'fp4'"):
        precision_bytes("fp4")


def test_shape_for_params_picks_nearest_reference() -> None:
    assert shape_for_params(7e9).name == "Llama-3.1-8B"
    assert shape_for_params(70e9).name == "Llama-3.1-70B"
    assert shape_for_params(405e9).name == "Llama-3.1-405B"
    assert shape_for_params(1e8).name == "GPT-3-125M"
    for s in REFERENCE_SHAPES:
        assert s.hidden % s.heads == 0 and s.heads % s.kv_heads == 0


params_st = st.floats(min_value=1e6, max_value=1e13, allow_nan=False)
devices_st = st.integers(min_value=1, max_value=100_000)
stage_st = st.sampled_from([0, 1, 2, 3])
k_st = st.sampled_from([0.0, 4.0, 8.0, 12.0, 16.0])


@settings(max_examples=300, deadline=None)
@given(params=params_st, n=devices_st, extra=st.integers(min_value=0, max_value=10_000), stage=stage_st, k=k_st)
def test_more_devices_never_increase_per_device_memory(params: float, n: int, extra: int, stage: int, k: float) -> None:
    fewer = model_state_memory(params, n, stage, optimizer_multiplier=k)
    more = model_state_memory(params, n + extra, stage, optimizer_multiplier=k)
    assert more.total_bytes <= fewer.total_bytes
    for field in ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes"):
        assert getattr(more, field) <= getattr(fewer, field)


@settings(max_examples=300, deadline=None)
@given(params=params_st, n=devices_st, stage=st.sampled_from([0, 1, 2]), k=k_st)
def test_higher_zero_stage_never_increases_per_device_memory(params: float, n: int, stage: int, k: float) -> None:
    lower = model_state_memory(params, n, stage, optimizer_multiplier=k)
    higher = model_state_memory(params, n, stage + 1, optimizer_multiplier=k)
    assert higher.total_bytes <= lower.total_bytes


@settings(max_examples=100, deadline=None)
@given(params=params_st, stage=stage_st)
def test_one_device_means_no_sharding(params: float, stage: int) -> None:
    assert model_state_memory(params, 1, stage).total_bytes == pytest.approx(16 * params)


@settings(max_examples=100, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4, 8]), extra=st.sampled_from([2, 4]), ckpt=st.sampled_from(["none", "selective", "full"])
)
def test_more_tensor_parallel_never_increases_activations(t: int, extra: int, ckpt: str) -> None:
    kw = {"layers": 8, "hidden": 4096, "seq_len": 4096, "micro_batch": 2, "heads": 32, "checkpointing": ckpt}
    lo = activation_memory(tensor_parallel=t, **kw)  # type: ignore[arg-type]
    hi = activation_memory(tensor_parallel=t * extra, **kw)  # type: ignore[arg-type]
    assert hi.total_bytes <= lo.total_bytes
    none = activation_memory(tensor_parallel=t, **{**kw, "checkpointing": "none"})  # type: ignore[arg-type]
    assert lo.total_bytes <= none.total_bytes
