"""Every shipped blueprint's plan: no rate without a date, stale prices named against a day passed in, every
unpriced item named with its one-line reason, and the compute of each blueprint priced or said why not."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from mlstack import config as blueprint_config
from mlstack import resources
from mlstack.catalog import quotes
from mlstack.catalog.price_check import age_warnings, undated
from mlstack.plan import build_plan, render
from mlstack.plan.model import Plan

SHIPPED = sorted(p.stem for p in resources.blueprints_dir().glob("*.yaml"))
DAY = dt.date(2026, 12, 1)
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# A cost row is compute when it bills instances, serverless capacity or (document-ai, which runs no instance) the
# managed AI services' metered units; the rest is network, control plane and storage.
COMPUTE = re.compile(r"\b(ml\.)?[a-z][a-z0-9-]*\.\d*(x?large|medium|small|micro|nano)\b|serverless|documents/month")


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {name: build_plan(blueprint_config.load(name), today=DAY) for name in SHIPPED}


def test_twenty_blueprints_are_shipped() -> None:
    # 16, then eks-karpenter-training and hyperpod-eks-teams (issue 26), eks-llm-serving and
    # eks-llm-serving-multinode (issue 27)
    assert len(SHIPPED) == 20


def test_no_plan_prices_with_an_undated_rate(plans: dict[str, Plan]) -> None:
    for name, plan in plans.items():
        for cost in plan.costs:
            if cost.unit_per_hour is not None:
                assert cost.price_date and DATE.match(cost.price_date), (name, cost.item)
                assert len(cost.source) > 20, (name, cost.item)  # a source a reader can open
            else:
                assert cost.price_date is None, (name, cost.item)
        assert undated((c.item, c.price_date) for c in plan.costs if c.unit_per_hour is not None) == []


def test_every_unpriced_item_is_named_with_its_reason_on_one_line(plans: dict[str, Plan]) -> None:
    for name, plan in plans.items():
        text = render(plan)
        for item, why in plan.unpriced_reasons.items():
            assert why and "\n" not in why and len(why) < 260, (name, item, why)
            assert f"  {item}: {why}" in text.splitlines(), (name, item)
        assert plan.to_json()["unpriced_reasons"] == plan.unpriced_reasons


def test_each_blueprint_prices_its_compute_or_says_why(plans: dict[str, Plan]) -> None:
    for name, plan in plans.items():
        compute = [c for c in plan.costs if COMPUTE.search(c.item)]
        assert compute, name  # every shipped blueprint runs compute
        for cost in compute:
            if cost.unit_per_hour is None:
                assert re.search(r"no dated|not known|no hourly rate|billed per|not in the", cost.source), (name, cost)


def test_eks_gpu_training_prices_p5_at_the_dated_post_cut_rate(plans: dict[str, Plan]) -> None:
    plan = plans["eks-gpu-training"]
    p5 = next(c for c in plan.costs if c.item.startswith("p5.48xlarge"))
    assert p5.unit_per_hour == 55.04 and p5.price_date == "2026-01-21" and "7412fd2" in p5.source
    text = render(plan)
    assert "p5.48xlarge" not in text.split("No price known for:")[-1].split("\n")[0]
    assert any("would cost $220.16/hour" in w for w in plan.warnings)  # 4 nodes at max_size


def test_hosting_rows_are_priced_where_a_dated_rate_exists(plans: dict[str, Plan]) -> None:
    inf2 = next(c for c in plans["inference-inferentia2"].costs if "ml.inf2.8xlarge" in c.item)
    assert inf2.unit_per_hour == 2.36 and inf2.price_date == "2025-01-26"
    serving = next(c for c in plans["mlops-efa-training"].costs if c.item.startswith("endpoint "))
    assert serving.unit_per_hour == 1.515  # ml.g5.2xlarge at its SageMaker hosting rate, never the EC2 one
    graviton = next(c for c in plans["inference-graviton"].costs if "ml.c7g.xlarge" in c.item)
    assert graviton.unit_per_hour is None and "EC2 rate must not stand in" in graviton.source


def test_stale_prices_are_named_against_the_day_passed_in() -> None:
    config = blueprint_config.load("eks-gpu-training")
    fresh = build_plan(config, today=dt.date(2026, 2, 1))
    late = build_plan(config, today=DAY)
    old = [w for w in fresh.warnings if "older than 90 days" in w]
    # on 2026-02-01 the snapshot of 2026-01-21 is fresh; the EKS rate (AWS, effective 2024-04-01) is not
    assert len(old) == 1 and "EKS control plane (2024-04-01)" in old[0] and "p5.48xlarge" not in old[0]
    (stale,) = [w for w in late.warnings if "older than 90 days" in w]
    assert stale.startswith("prices older than 90 days on 2026-12-01: ") and "p5.48xlarge" in stale
    assert "mlstack prices refresh" in stale
    assert "prices: oldest price date used 2024-04-01 (EKS control plane)" in late.warnings


def test_age_warnings_are_pure() -> None:
    assert age_warnings([], DAY) == []
    assert age_warnings([("a", "2026-11-30")], DAY) == ["prices: oldest price date used 2026-11-30 (a)"]
    lines = age_warnings([("a", "2026-11-30"), ("b", "2026-08-01")], DAY)
    assert lines[1].startswith("prices older than 90 days on 2026-12-01: b (2026-08-01);")


def test_a_rate_without_a_date_never_prices_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # any source that slipped a rate through without its date: the plan drops the rate and says why

    def undated_quote(support_type: str, region: str) -> quotes.Quote:
        return quotes.Quote(0.1, None, "a remembered rate")

    monkeypatch.setattr("mlstack.plan.training.eks_control_plane_quote", undated_quote)
    plan = build_plan(blueprint_config.load("eks-gpu-training"), today=DAY)
    eks = next(c for c in plan.costs if c.item == "EKS control plane")
    assert eks.unit_per_hour is None and eks.source == "rate has no date, not used (a remembered rate)"
    assert "EKS control plane" in plan.unpriced


def test_the_elastic_and_eks_serving_blueprints_price_their_accelerated_nodes(plans: dict[str, Plan]) -> None:
    serving = plans["eks-llm-serving"]
    nodes = next(c for c in serving.costs if c.item == "g6e.xlarge chat nodes (min)")
    assert nodes.unit_per_hour == 1.861 and nodes.price_date == "2026-01-21" and nodes.quantity == 1
    assert "no dated Network Load Balancer rate" in serving.unpriced_reasons["chat internal NLB (hours; LCUs extra)"]
    elastic = plans["eks-karpenter-training"]
    p5 = next(c for c in elastic.costs if c.item.startswith("p5.48xlarge p5"))
    assert p5.unit_per_hour == 55.04 and p5.price_date == "2026-01-21" and p5.quantity == 0  # the pool starts empty
    assert any("would cost $220.16/hour" in w for w in elastic.warnings)  # its limit: 4 nodes
