"""The inference plan's output tokens/s and $ per million output tokens: estimated by the serving model where the
blueprint gives no measured throughput, measured when a `mlstack serve-check` report is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog.hosting_prices import hosting_price
from mlstack.cli import main
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.design.serving import Workload, estimate_instance, measured_figures
from mlstack.errors import InputError
from mlstack.plan import build_plan, render

TOKENS = {"context_tokens": 2048, "output_tokens": 256, "concurrency": 4}


def _blueprint(tmp_path: Path, **traffic: Any) -> Path:
    data = yaml.safe_load((BLUEPRINTS_DIR / "inference-gpu-realtime.yaml").read_text())
    data["name"] = "llm"
    data["inference"]["endpoints"][0]["traffic"] = {"requests_per_second": 2, **traffic}
    path = tmp_path / "llm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _level(concurrency: int, tokens_per_s: float, failed: int = 0) -> dict[str, Any]:
    pct = {"p50": 40.0, "p90": 45.0, "p99": 50.0}
    return {
        "concurrency": concurrency,
        "requests": 16,
        "failed": failed,
        "errors": [],
        "wall_s": 10.0,
        "output_tokens": int(tokens_per_s * 10),
        "output_tokens_per_s": tokens_per_s,
        "ttft_ms": {"p50": 120.0 * concurrency, "p90": 1.0, "p99": 1.0},
        "tpot_ms": pct,
        "latency_ms": pct,
    }


def _report(tmp_path: Path, *levels: dict[str, Any]) -> Path:
    path = tmp_path / "serve-check.json"
    path.write_text(json.dumps({"url": "http://x", "model": "llama", "max_tokens": 128, "levels": list(levels)}))
    return path


def test_without_measured_throughput_the_plan_prints_the_serving_model_estimate(tmp_path: Path) -> None:
    plan = build_plan(load(_blueprint(tmp_path, tokens=TOKENS)))
    serving = plan.details["inference"][0]["serving"]
    expected = estimate_instance(8.03, "bf16", "ml.g5.2xlarge", Workload(2048, 256, 4))
    assert expected is not None and expected.source == "estimate"
    g5 = serving["g5"]
    assert g5["source"] == "estimate"
    assert g5["output_tokens_per_s"] == pytest.approx(expected.output_tokens_per_s, rel=1e-3)
    price = hosting_price("ml.g5.2xlarge", "us-east-1")
    assert price is not None
    assert g5["usd_per_million_output_tokens"] == pytest.approx(
        price.usd_per_hour / (expected.output_tokens_per_s * 3600) * 1e6, rel=1e-3
    )
    assert 30 < g5["output_tokens_per_s"] < 500  # 8B bf16 on one A10G (600 GB/s), 4 sequences: tens of tokens/s
    text = render(plan)
    assert f"g5: {expected.output_tokens_per_s:,.0f} output tokens/s per instance (estimate: serving model: TP1" in text
    assert "per 1M output tokens (SageMaker hosting)" in text


def test_a_blueprints_measured_requests_per_second_times_output_tokens_is_used_over_the_estimate(
    tmp_path: Path,
) -> None:
    plan = build_plan(load(_blueprint(tmp_path, throughput_per_instance=1.5, tokens=TOKENS)))
    g5 = plan.details["inference"][0]["serving"]["g5"]
    assert (g5["source"], g5["output_tokens_per_s"]) == ("measured", 384.0)


def test_endpoints_without_a_token_workload_get_no_figures() -> None:
    plan = build_plan(load(BLUEPRINTS_DIR / "inference-graviton.yaml"))
    assert all(e.get("serving") == {} for e in plan.details["inference"])


def test_a_serve_check_report_is_preferred_and_its_best_clean_level_is_the_capacity(tmp_path: Path) -> None:
    # The 16-concurrency level is fastest but had failures: the 4-concurrency level is the capacity.
    report = _report(tmp_path, _level(1, 30.0), _level(4, 95.5), _level(16, 300.0, failed=2))
    plan = build_plan(load(_blueprint(tmp_path, tokens=TOKENS)), serve_checks={"chat/g5": report})
    serving = plan.details["inference"][0]["serving"]
    assert serving["g5"]["source"] == "measured"
    assert serving["g5"]["output_tokens_per_s"] == 95.5
    assert serving["g5"]["tpot_ms"] == 40.0 and serving["g5"]["ttft_ms"] == 480.0
    assert serving["g6"]["source"] == "estimate"  # the report names g5 only
    assert "96 output tokens/s per instance (measured: serve-check serve-check.json: concurrency 4" in render(plan)


def test_plan_cli_takes_serve_check_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(tmp_path, _level(8, 200.0))
    assert main(["plan", str(_blueprint(tmp_path)), "--serve-check", f"chat={report}", "--json"]) == 0
    serving = json.loads(capsys.readouterr().out)["details"]["inference"][0]["serving"]
    # Named by endpoint: every variant of it, even without a token workload in the blueprint.
    assert serving["g5"]["output_tokens_per_s"] == serving["g6"]["output_tokens_per_s"] == 200.0
    assert main(["plan", str(_blueprint(tmp_path)), "--serve-check", str(report)]) == 0  # one endpoint: bare FILE


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("chat/g7=r.json", "'chat/g7' is no endpoint or variant here; use one of chat, chat/g5, chat/g6"),
        ("nope=r.json", "'nope' is no endpoint or variant here"),
    ],
)
def test_a_serve_check_for_an_unknown_endpoint_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    assert main(["plan", str(_blueprint(tmp_path)), "--serve-check", value]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ('{"levels": []}', "no 'levels' list"),
        (json.dumps({"levels": [_level(4, 10.0, failed=1)]}), "no concurrency level finished without failed"),
    ],
)
def test_a_bad_report_is_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        measured_figures(path)
