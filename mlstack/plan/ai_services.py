"""`plan_ai_services`: the AI services part of `mlstack plan`, from the blueprint alone (no aws_cdk import).

Usage-priced services have no hourly cost: the plan gives the metered quantities per 1,000 documents (pipeline)
or 1,000 requests (API), multiplies by the catalog's dated prices where it has them, and says which prices it
does not have instead of guessing. The blueprint's monthly volumes become hourly cost rows so the plan's
totals include them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog.ai_services import Price, ai_catalog
from mlstack.config import BlueprintConfig
from mlstack.config.ai_services import ApiConfig, DocumentPipelineConfig
from mlstack.design.ai_services import needs_media_bucket
from mlstack.plan.model import HOURS_PER_MONTH, Cost, Plan, Resource

STACK = "AiServicesStack"
COMPREHEND_UNIT_CHARS = 100
COMPREHEND_MIN_UNITS = 3
"""Comprehend meters 100-character units with a 3-unit minimum per request (Amazon Comprehend pricing)."""
COMPREHEND_REQUEST_CHARS = 100_000
"""The pipeline sends at most 100 KB per DetectEntities call (counted here as characters: ASCII text)."""
TRANSITIONS_ONE_CHECK = 9
"""Document, StartAnalysis, WaitForTextract, CheckAnalysis, TextractDone?, ExtractEntities (the Map state),
WriteResult, IndexResult, Indexed."""
TRANSITIONS_PER_PIECE = 1
"""ExtractChunk, once per 100 KB piece of the text (the Map state's iterations)."""
TRANSITIONS_PER_EXTRA_CHECK = 3
"""Each further status check: WaitForTextract, CheckAnalysis, TextractDone?."""

_API_METER: dict[str, tuple[str | None, int | None, str]] = {
    "comprehend.sentiment": ("comprehend.nlp.unit", COMPREHEND_MIN_UNITS, "units"),
    "comprehend.entities": ("comprehend.nlp.unit", COMPREHEND_MIN_UNITS, "units"),
    "comprehend.pii": ("comprehend.pii.unit", COMPREHEND_MIN_UNITS, "units"),
    "rekognition.labels": ("rekognition.image", 1, "images"),
    "rekognition.moderation": ("rekognition.image", 1, "images"),
    "rekognition.text": ("rekognition.image", 1, "images"),
    "textract.analyze": ("textract.analyze_document.page", 1, "pages"),
    "translate.text": ("translate.character", None, "requests (characters per request vary)"),
    "bedrock.converse": ("bedrock.tokens", None, "requests (tokens per request vary)"),
    "transcribe.start": (None, None, "jobs (billed per audio second; price not in the catalog)"),
}
"""API operation -> (catalog price, metered units per smallest request or None when they vary, what is counted).
A request of the smallest billable size: Comprehend's 3-unit minimum, one image, one page."""


@dataclass(frozen=True)
class Metered:
    """One metered quantity per 1,000 documents or requests, and its price if the catalog has one."""

    what: str
    quantity: float
    price: Price | None

    @property
    def usd(self) -> float | None:
        if self.price is None or self.price.usd is None:
            return None
        return self.quantity * self.price.usd

    def row(self) -> str:
        if self.usd is not None and self.price is not None:
            return (
                f"{self.what}: {self.quantity:,.0f} x ${self.price.usd:g}/{self.price.unit} = ${self.usd:,.2f} "
                f"({self.price.date})"
            )
        return f"{self.what}: {self.quantity:,.0f}; price not in the catalog"


def comprehend_units(characters: int) -> int:
    """Units billed for one document's text, split into requests of at most 100,000 characters."""
    units, left = 0, characters
    while left > 0:
        piece = min(left, COMPREHEND_REQUEST_CHARS)
        units += max(COMPREHEND_MIN_UNITS, math.ceil(piece / COMPREHEND_UNIT_CHARS))
        left -= piece
    return units


def pipeline_per_thousand(spec: DocumentPipelineConfig) -> list[Metered]:
    """Metered quantities for 1,000 documents (one Textract status check each: the least a document costs)."""
    catalog = ai_catalog()
    characters = round(spec.pages_per_document * spec.characters_per_page)
    units = 1000 * comprehend_units(characters)
    pieces = max(1, math.ceil(characters / COMPREHEND_REQUEST_CHARS))
    rows = [
        Metered(
            "Textract text detection pages", 1000 * spec.pages_per_document, catalog.price("textract.detect_text.page")
        ),
        Metered("Comprehend entity units", units, catalog.price("comprehend.nlp.unit")),
    ]
    if spec.pii_redaction:
        rows.append(Metered("Comprehend PII units", units, catalog.price("comprehend.pii.unit")))
    rows.append(
        Metered(
            "Step Functions transitions",
            1000 * (TRANSITIONS_ONE_CHECK + TRANSITIONS_PER_PIECE * pieces),
            catalog.price("stepfunctions.standard.transition"),
        )
    )
    return rows


def api_per_thousand(spec: ApiConfig) -> list[Metered]:
    """What each operation meters per 1,000 requests of the smallest billable size (unpriced where it varies)."""
    catalog = ai_catalog()
    rows = []
    for op in spec.operations:
        price_id, per_request, counted = _API_METER[op]
        priced = price_id is not None and per_request is not None
        price = catalog.price(price_id) if priced and price_id else None
        rows.append(Metered(f"{op} {counted}", 1000 * (per_request or 1), price))
    return rows


def _known(rows: list[Metered]) -> float:
    return sum(r.usd for r in rows if r.usd is not None)


def plan_ai_services(config: BlueprintConfig, plan: Plan) -> None:
    """Resources, services used, cost per 1,000 documents / requests with dated sources, and what is unpriced."""
    ai = config.ai_services
    if ai is None:
        return
    plan.resources.append(Resource(STACK, "S3 bucket", "access logs (SSE-S3, TLS only, versioned)"))
    sections: list[tuple[str, list[str]]] = []
    rows = [f"services: {', '.join(ai.services)}"]
    unpriced: set[str] = set()
    if ai.document_pipeline is not None:
        spec = ai.document_pipeline
        plan.resources += [
            Resource(STACK, "S3 bucket", "documents: input/, results/, failed/ (project KMS key, EventBridge on)"),
            Resource(STACK, "DynamoDB table", "document index (on-demand, project KMS key, PITR)"),
            Resource(STACK, "SQS queue", "dead-letter queue (SSE-SQS, 14 days)"),
            Resource(STACK, "Step Functions state machine", "Standard; logs ALL without execution data, X-Ray"),
            Resource(STACK, "Lambda function", "pipeline tasks (Python 3.14, arm64)", 5),
            Resource(STACK, "EventBridge rule", "S3 Object Created under input/ -> state machine"),
        ]
        metered = pipeline_per_thousand(spec)
        rows.append(
            f"per 1,000 documents ({spec.pages_per_document:g} pages x {spec.characters_per_page:,} characters; "
            f"language {spec.language}{', PII redaction' if spec.pii_redaction else ''}):"
        )
        rows += [f"  {m.row()}" for m in metered]
        rows.append(
            f"  documents of up to {spec.max_pages:,} pages (longer ones fail with the reason under failed/); "
            "Textract text detection (LINE text kept), Comprehend per 100 KB piece, a few pieces at a time"
        )
        rows.append(
            f"  known total: ${_known(metered):,.2f} per 1,000 documents (+{TRANSITIONS_PER_EXTRA_CHECK} "
            f"transitions per further {spec.poll_seconds} s status check)"
        )
        _hourly(plan, metered, spec.documents_per_month, "documents", unpriced)
    if ai.api is not None:
        api = ai.api
        plan.resources += [
            Resource(
                STACK,
                "HTTP API",
                f"{api.auth} auth, {len(api.operations)} POST routes, "
                f"throttled {api.throttle.rate_limit:g}/s burst {api.throttle.burst_limit}",
            ),
            Resource(STACK, "Lambda function", "API handler (Python 3.14, arm64)"),
        ]
        if needs_media_bucket(ai):
            plan.resources.append(Resource(STACK, "S3 bucket", "media and transcripts (project KMS key)"))
        metered = api_per_thousand(api)
        rows.append("per 1,000 requests of each operation:")
        rows += [f"  {m.row()}" for m in metered]
        if api.bedrock is not None:
            rows.append(
                f"  bedrock models: {', '.join(api.bedrock.model_ids)}"
                + (
                    f"; guardrail {api.bedrock.guardrail.id} v{api.bedrock.guardrail.version}"
                    if api.bedrock.guardrail
                    else ""
                )
            )
        # No hourly rows: requests_per_month is for the whole API, not per operation.
        unpriced |= {m.what for m in metered if m.usd is None}
        unpriced |= {"API Gateway HTTP API requests", "Lambda requests and GB-seconds"}
    rows.append("not in the catalog (cost above is a lower bound): " + ", ".join(sorted(unpriced)))
    sections.append(("AI services", rows))
    plan.details.setdefault("sections", []).extend(sections)
    plan.warnings.append(
        "AI services are billed per use: the per-1,000 figures and hourly rows price only what the catalog has a "
        "dated price for; see 'not in the catalog' under AI services"
    )


def _hourly(plan: Plan, metered: list[Metered], per_month: int, what: str, unpriced: set[str]) -> None:
    for m in metered:
        per_hour = m.quantity / 1000 * per_month / HOURS_PER_MONTH
        price = m.price
        if price is None or price.usd is None:
            unpriced.add(m.what)
        plan.costs.append(
            Cost(
                f"{m.what} at {per_month:,} {what}/month",
                per_hour,
                None if price is None else price.usd,
                None if price is None else price.date,
                _why(price),
            )
        )


def _why(price: Price | None) -> str:
    """The price's source, or for a missing / unconfirmed price the one-line reason it has none."""
    if price is None:
        return "not in the AI services catalog"
    return price.source if price.usd is not None else f"no dated price in the AI services catalog: {price.source}"
