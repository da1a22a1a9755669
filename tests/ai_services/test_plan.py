"""`mlstack plan` for the AI services layer: services, cost per 1,000 documents / requests, dated sources."""

from __future__ import annotations

import pytest

from mlstack.catalog.ai_services import ai_catalog
from mlstack.config import load
from mlstack.plan import HOURS_PER_MONTH, build_plan, render
from mlstack.plan.ai_services import TRANSITIONS_ONE_CHECK, comprehend_units


def test_comprehend_units_have_a_three_unit_minimum_per_request() -> None:
    assert comprehend_units(50) == 3
    assert comprehend_units(10_000) == 100
    assert comprehend_units(100_050) == 1000 + 3  # a second request for the last 50 characters


def test_document_ai_plan_lists_services_and_prices_only_what_the_catalog_has() -> None:
    plan = build_plan(load("document-ai"))
    assert plan.stacks == ["NetworkStack", "AiServicesStack"]
    rows = dict(plan.details["sections"])["AI services"]
    assert rows[0] == "services: bedrock, comprehend, textract"
    text = "\n".join(rows)
    # 4 pages x 2,500 characters = 10,000 characters = 100 units per document.
    assert "Comprehend entity units: 100,000; price not in the catalog" in text
    assert "Comprehend PII units: 100,000; price not in the catalog" in text
    # Text detection: the pipeline keeps LINE text only, so it does not pay for TABLES/FORMS analysis.
    assert "Textract text detection pages: 4,000; price not in the catalog" in text
    assert "analysis pages" not in text.split("per 1,000 requests")[0]
    assert "documents of up to 3,000 pages (longer ones fail with the reason under failed/)" in text
    price = ai_catalog().price("stepfunctions.standard.transition")
    # 9 states plus one ExtractChunk per 100 KB piece (10,000 characters: one piece).
    assert f"Step Functions transitions: 10,000 x $2.5e-05/transition = $0.25 ({price.date})" in text
    assert "known total: $0.25 per 1,000 documents" in text
    assert "not in the catalog (cost above is a lower bound):" in rows[-1]
    assert "Textract text detection pages" in rows[-1] and "API Gateway HTTP API requests" in rows[-1]


def test_monthly_volume_becomes_hourly_cost_rows_with_source_and_date() -> None:
    plan = build_plan(load("document-ai"))
    (transitions,) = [c for c in plan.costs if c.item.startswith("Step Functions transitions")]
    assert transitions.item == "Step Functions transitions at 20,000 documents/month"
    assert transitions.quantity == pytest.approx(20_000 * (TRANSITIONS_ONE_CHECK + 1) / HOURS_PER_MONTH)
    assert transitions.per_hour == pytest.approx(20_000 * 10 * 0.000025 / HOURS_PER_MONTH)
    assert transitions.price_date == "2026-11-30"
    assert "aws.amazon.com/step-functions/pricing" in transitions.source
    assert "Textract text detection pages at 20,000 documents/month" in plan.unpriced
    rendered = render(plan)
    assert "AI services" in rendered and "No price known for:" in rendered


def test_api_is_priced_per_smallest_request_and_adds_no_hourly_rows() -> None:
    plan = build_plan(load("document-ai"))
    rows = dict(plan.details["sections"])["AI services"]
    assert "  comprehend.sentiment units: 3,000; price not in the catalog" in rows
    assert "  bedrock.converse requests (tokens per request vary): 1,000; price not in the catalog" in rows
    # requests_per_month is the whole API's volume, so it is not multiplied into each operation.
    assert not [c for c in plan.costs if "requests/month" in c.item]
