"""Utilisation table: every row sourced and sane; published runs' GPU-hours reproduced within 10%; the pick."""

from __future__ import annotations

import datetime as dt

import pytest

from mlstack.catalog.instances import catalog
from mlstack.catalog.utilisation import UNCERTAINTY, attention_share, load_utilisation, pick, rows, training_hours
from mlstack.errors import CatalogError, InputError


def test_every_row_has_a_source_a_date_and_a_setting() -> None:
    assert len(rows()) >= 8
    for r in rows():
        assert any(k in r.source for k in ("arXiv", "docs/", "model card", "MLPerf")), r.id
        assert dt.date.fromisoformat(r.date) <= dt.date(2026, 11, 30)
        assert r.seq_len >= 1024 and r.parallelism and r.derivation


def test_ranges_are_sane() -> None:
    for r in rows():
        # published runs: 30-55% of dense peak for large models; down to 15% for Llama 3 8B on H100 as its model
        # card's GPU-hours give it (restarts and the small per-GPU batch of a large cluster inside)
        assert 0.15 <= r.mfu <= 0.6, r.id
        assert r.model_tflops < r.peak_tflops
        if r.precision == "bf16":  # the peak used for MFU is the catalog's dense bf16 peak
            assert r.peak_tflops == catalog().accelerator_models[r.accelerator].peak_dense_bf16_tflops


def test_tokens_per_second_conversion_of_the_llama1_row() -> None:
    (r,) = [r for r in rows() if r.id == "llama1-65b-a100"]
    assert r.model_tflops == pytest.approx(6 * 65.2e9 * 380 / 1e12, rel=1e-3)


# (accelerator, params, tokens, seq_len, layers, hidden, published GPU-hours): the runs the table was fitted to, which
# it must reproduce closely (the runs it was not fitted to are in test_utilisation_checks.py)
PUBLISHED_RUNS = [
    # LLaMA 65B: 1.4T tokens, Table 15 of arXiv:2302.13971: 1,022,362 A100-80GB hours
    ("A100", 65.2e9, 1.4e12, 2048, 80, 8192, 1_022_362),
    # Llama 2 70B: 2.0T tokens, Table 2 of arXiv:2307.09288: 1,720,320 A100-80GB hours
    ("A100", 69e9, 2.0e12, 4096, 80, 8192, 1_720_320),
    # Llama 3.1 405B: 15.6T tokens (arXiv:2407.21783 §3), model card: 30.84M H100-80GB hours
    ("H100", 405.9e9, 15.6e12, 8192, 126, 16384, 30_840_000),
    # GPT-3 175B on 300B tokens, 1024 A100 for 34 days (arXiv:2104.04473 §5.1 end-to-end estimate)
    ("A100", 175e9, 300e9, 2048, 96, 12288, 1024 * 34 * 24),
    # Llama 3 8B and 70B: 15T tokens, 1.3M and 6.4M H100-80GB hours (Llama 3 model card)
    ("H100", 8.03e9, 15e12, 8192, 32, 4096, 1_300_000),
    ("H100", 70.6e9, 15e12, 8192, 80, 8192, 6_400_000),
]


@pytest.mark.parametrize(
    ("accelerator", "params", "tokens", "seq_len", "layers", "hidden", "gpu_hours"), PUBLISHED_RUNS
)
def test_published_gpu_hours_reproduced_within_10_percent(
    accelerator: str, params: float, tokens: float, seq_len: int, layers: int, hidden: int, gpu_hours: float
) -> None:
    chosen = pick(accelerator, params, "bf16", seq_len=seq_len, layers=layers, hidden=hidden)
    peak = catalog().accelerator_models[accelerator].peak_dense_bf16_tflops
    assert peak is not None
    hours = training_hours(params, tokens, 1, peak, chosen)  # one device: hours = GPU-hours
    assert hours == pytest.approx(gpu_hours, rel=0.10)


def test_utilisation_grows_with_model_size_on_h100_and_the_range_is_under_2x() -> None:
    small, mid, large = (pick("H100", n, seq_len=8192) for n in (8e9, 70e9, 405e9))
    assert small.mfu < mid.mfu < large.mfu  # small models reach less of the peak at production batch sizes
    assert large.row.id == "llama3-405b-h100-16k"  # the middle of the three Llama 3 405B settings
    assert large.goodput == pytest.approx(0.9, abs=1e-3) and small.goodput == pytest.approx(1.0)
    for p in (small, mid, large):
        assert p.high / p.low == pytest.approx(UNCERTAINTY**2) and UNCERTAINTY**2 < 2
        assert p.hours_range(100.0) == pytest.approx((100 / UNCERTAINTY, 100 * UNCERTAINTY))
    # between two size points the utilisation is interpolated on log params
    between = pick("H100", (8.03e9 * 70.6e9) ** 0.5, seq_len=8192, layers=48, hidden=6144)
    assert small.mfu < between.mfu < mid.mfu


def test_longer_sequences_cost_more_on_small_models() -> None:
    # attention FLOPs (12 L h s per token) are outside 6ND: at 8k tokens an 8B model does 27% more work per token
    assert attention_share(8.03e9, 32, 4096, 8192) == pytest.approx(0.267, abs=0.001)
    short, long = pick("H100", 8.03e9, seq_len=2048), pick("H100", 8.03e9, seq_len=8192)
    assert short.mfu / long.mfu == pytest.approx(
        (1 + attention_share(8.03e9, 32, 4096, 8192)) / (1 + attention_share(8.03e9, 32, 4096, 2048))
    )
    with pytest.raises(InputError, match="sequence length must be positive"):
        pick("H100", 8e9, seq_len=0)


def test_pick_alias_and_borrowed() -> None:
    h200 = pick("H200", 70e9)
    assert h200.row.accelerator == "H100" and "same compute die" in h200.note and not h200.borrowed
    trn = pick("Trainium2", 70e9)
    assert trn.borrowed and "borrowed" in trn.label and "no published Trainium2" in trn.note
    fp8 = pick("B200", 8e9, "fp8")
    assert fp8.row.id == "nemo-llama3-8b-b200-fp8" and not fp8.borrowed


BAD_TABLES = [
    ("rows: []", "utilisation table is invalid"),
    (
        "rows:\n  - {id: a, accelerator: A100, model: m, params: 1e9, precision: bf16, devices: 8, seq_len: 2048,"
        " parallelism: dp, model_tflops: 300, peak_tflops: 312, goodput: 1, derivation: d,"
        " source: 'a source long enough', date: '2024-01-01'}",
        "MFU outside 5-80%",
    ),
    (
        "rows:\n  - {id: a, accelerator: A100, model: m, params: 1e9, precision: bf16, devices: 8, seq_len: 2048,"
        " parallelism: dp, model_tflops: 100, peak_tflops: 312, goodput: 1, derivation: d,"
        " source: 'a source long enough', date: 'last year'}",
        "date",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_TABLES)
def test_bad_tables_are_rejected(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_utilisation(text)
