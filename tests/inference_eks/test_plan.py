"""`mlstack plan eks-llm-serving`: $/h and $ per million output tokens, from the estimate or a serve-check report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlstack.catalog.prices import price
from mlstack.cli import main
from mlstack.config import load
from mlstack.design.serving_eks import server_designs
from mlstack.plan import build_plan, render

NAME = "eks-llm-serving"


def test_the_plan_prices_the_fleet_per_hour_and_per_million_output_tokens() -> None:
    config = load(NAME)
    plan = build_plan(config)
    assert config.inference_eks is not None
    (design,) = server_designs(config.inference_eks)
    (figures,) = plan.details["inference_eks"]
    node = price("g6e.xlarge")
    assert node is not None and design.figures is not None
    assert figures["per_hour_min"] == pytest.approx(node.usd_per_hour)
    serving = figures["serving"]
    assert serving["source"] == "estimate"
    assert serving["usd_per_million_output_tokens"] == pytest.approx(
        node.usd_per_hour / (design.figures.output_tokens_per_s * 3600) * 1e6, rel=1e-3
    )
    text = render(plan)
    assert "per 1M output tokens (EC2 on-demand)" in text and "--gpu-memory-utilization" in text
    assert any(c.item == "g6e.xlarge chat nodes (min)" for c in plan.costs)
    assert any("delete the Services" in w for w in plan.warnings)


def test_a_serve_check_report_replaces_the_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "chat.json"
    level = {"concurrency": 16, "failed": 0, "output_tokens_per_s": 900.0, "tpot_ms": {"p50": 17.0}}
    report.write_text(json.dumps({"model": "llama", "levels": [level]}))
    assert main(["plan", NAME, "--serve-check", f"chat={report}", "--json"]) == 0
    (figures,) = json.loads(capsys.readouterr().out)["details"]["inference_eks"]
    assert figures["serving"]["source"] == "measured"
    assert figures["serving"]["output_tokens_per_s"] == 900.0
    node = price("g6e.xlarge")
    assert node is not None
    assert figures["serving"]["usd_per_million_output_tokens"] == pytest.approx(
        node.usd_per_hour / (900 * 3600) * 1e6, rel=1e-3
    )


def test_precheck_says_an_eks_serving_blueprint_needs_nothing_before_its_deploy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["precheck", NAME]) != 0
    err = capsys.readouterr().err
    assert "serves on EKS: nothing must exist before its deploy" in err and len(err.strip().splitlines()) == 1
