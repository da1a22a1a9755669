"""The `ai_services:` section of a blueprint (AiServicesStack): an API over managed AI services, and a
document-intelligence pipeline.

Rules checked here against the AI services catalog (`mlstack/catalog/data/ai_services.yaml`), each with a fix:
- a language a Comprehend feature does not support (entities, sentiment, PII detection);
- a region a service is not offered in, where the catalog knows the service's regions;
- a Bedrock model ID that is not in the catalog (IAM is scoped to the ARNs of the listed models);
- a guardrail without a version (`bedrock:ApplyGuardrail` and Converse need one; an unpinned DRAFT changes).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog.ai_services import ai_catalog
from mlstack.config.base import StrictModel, email_addresses

ApiOperation = Literal[
    "comprehend.sentiment",
    "comprehend.entities",
    "comprehend.pii",
    "translate.text",
    "rekognition.labels",
    "rekognition.moderation",
    "rekognition.text",
    "textract.analyze",
    "transcribe.start",
    "bedrock.converse",
]
"""Operations the AI service API can expose; each is a `POST /<operation>` route."""

_COMPREHEND_FEATURE = {
    "comprehend.sentiment": "sentiment",
    "comprehend.entities": "entities",
    "comprehend.pii": "pii",
}
_FEATURE_NAMES = {"sentiment": "sentiment", "entities": "entity detection", "pii": "PII detection"}
_SERVICE_OF = {
    "comprehend": "comprehend",
    "translate": "translate",
    "rekognition": "rekognition",
    "textract": "textract",
    "transcribe": "transcribe",
    "bedrock": "bedrock",
}


def check_language(feature: str, language: str) -> str | None:
    """A problem line when Comprehend's `feature` does not accept `language`; None when it does."""
    supported = ai_catalog().service("comprehend").languages[feature]
    if language in supported:
        return None
    return (
        f"Comprehend {_FEATURE_NAMES[feature]} does not support language {language!r}; "
        f"use one of {', '.join(supported)}"
    )


class GuardrailConfig(StrictModel):
    """A Bedrock guardrail applied to every model call (create it first; the stack only references it)."""

    id: str = Field(pattern=r"^[a-z0-9]{1,64}$")
    """The guardrail's ID (the last part of its ARN)."""
    version: str | None = Field(default=None, pattern=r"^([1-9][0-9]{0,7}|DRAFT)$")
    """A published version number ('1'); required. 'DRAFT' is accepted but changes whenever someone edits it."""

    @model_validator(mode="after")
    def _versioned(self) -> GuardrailConfig:
        if self.version is None:
            raise ValueError(
                "version: a guardrail needs a version; publish one (CreateGuardrailVersion) and write it, e.g. '1'"
            )
        return self


class BedrockConfig(StrictModel):
    model_ids: list[str] = Field(min_length=1)
    """Foundation model IDs callers may choose from; each must be in the AI services catalog."""
    guardrail: GuardrailConfig | None = None
    max_tokens: int = Field(default=1024, ge=1, le=8192)
    """Upper bound on `maxTokens` a caller may ask for."""

    @field_validator("model_ids")
    @classmethod
    def _known_models(cls, value: list[str]) -> list[str]:
        known = ai_catalog().bedrock_model_ids
        for model_id in value:
            if model_id not in known:
                raise ValueError(
                    f"Bedrock model {model_id!r} is not in the AI services catalog; use one of {', '.join(known)} "
                    "or add it to mlstack/catalog/data/ai_services.yaml with its source"
                )
        if len(set(value)) != len(value):
            raise ValueError("a model ID is listed twice; list each once")
        return value


class ThrottleConfig(StrictModel):
    rate_limit: float = Field(default=50, gt=0, le=10000)
    """Steady-state requests per second for the whole API (API Gateway stage throttling)."""
    burst_limit: int = Field(default=100, ge=1, le=5000)


class ApiConfig(StrictModel):
    """An HTTPS API (API Gateway HTTP API) with one `POST /<operation>` route per operation."""

    operations: list[ApiOperation] = Field(min_length=1)
    auth: Literal["iam", "cognito"] = "iam"
    """`iam`: SigV4-signed callers with execute-api:Invoke. `cognito`: a JWT from the user pool below."""
    cognito_user_pool_id: str | None = Field(default=None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d_[0-9A-Za-z]+$")
    cognito_client_ids: list[str] = Field(default_factory=list)
    """App client IDs whose tokens are accepted (the JWT audience)."""
    language: str = "en"
    """Language of the text sent to the Comprehend operations."""
    throttle: ThrottleConfig = Field(default_factory=ThrottleConfig)
    timeout_seconds: int = Field(default=25, ge=3, le=29)
    """The handler's timeout; API Gateway HTTP APIs wait at most 30 s for an integration."""
    memory_mb: int = Field(default=512, ge=128, le=10240)
    bedrock: BedrockConfig | None = None
    """Required when `bedrock.converse` is an operation."""
    requests_per_month: int = Field(default=100_000, ge=0)
    """For `mlstack plan` only."""

    @field_validator("operations")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("an operation is listed twice; list each once")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ApiConfig:
        if self.auth == "cognito" and (self.cognito_user_pool_id is None or not self.cognito_client_ids):
            raise ValueError("auth: cognito needs cognito_user_pool_id and cognito_client_ids; add both")
        if self.auth == "iam" and (self.cognito_user_pool_id or self.cognito_client_ids):
            raise ValueError("cognito_user_pool_id/cognito_client_ids are only for auth: cognito; remove them")
        if ("bedrock.converse" in self.operations) != (self.bedrock is not None):
            raise ValueError("bedrock: give it exactly when bedrock.converse is an operation (model_ids, guardrail)")
        for op in self.operations:
            feature = _COMPREHEND_FEATURE.get(op)
            problem = check_language(feature, self.language) if feature else None
            if problem:
                raise ValueError(f"language: {problem}")
        return self

    @property
    def services(self) -> list[str]:
        return sorted({op.split(".")[0] for op in self.operations})


TEXTRACT_MAX_PAGES = 3000
"""Asynchronous Textract reads PDF and TIFF documents of up to 3,000 pages (Amazon Textract quotas)."""


class DocumentPipelineConfig(StrictModel):
    """Upload -> Step Functions -> Textract text detection (asynchronous) -> Comprehend -> JSON in S3 + a DynamoDB
    index. The pipeline keeps the text (LINE blocks), so it runs text detection, not the TABLES/FORMS analysis that
    costs many times more per page for the same lines."""

    language: str = "en"
    """Language of the documents (Comprehend entity detection, and PII detection when redacting)."""
    pii_redaction: bool = False
    """Also detect PII and write a redacted copy of the text."""
    max_pages: int = Field(default=TEXTRACT_MAX_PAGES, ge=1, le=TEXTRACT_MAX_PAGES)
    """Longest document accepted, in pages; a longer one is failed with the reason under failed/. Default and
    maximum: Textract's 3,000. Every step's time stays bounded up to it: the text is collected by a 15-minute
    step (about 2 pages per Textract result call) and Comprehend runs per 100 KB piece in a Map state."""
    poll_seconds: int = Field(default=10, ge=1, le=300)
    """Wait between Textract job status checks."""
    max_polls: int = Field(default=60, ge=1, le=1000)
    """Status checks before the document is failed as timed out."""
    documents_per_month: int = Field(default=1000, ge=0)
    pages_per_document: float = Field(default=3, gt=0)
    characters_per_page: int = Field(default=2000, gt=0)
    """The three above are for `mlstack plan` only."""

    @model_validator(mode="before")
    @classmethod
    def _no_features(cls, data: object) -> object:
        if isinstance(data, dict) and "textract_features" in data:
            raise ValueError(
                "textract_features: the pipeline keeps the text only and runs Textract text detection (TABLES and "
                "FORMS analysis cost many times more for the same lines); remove textract_features"
            )
        return data

    @model_validator(mode="after")
    def _languages(self) -> DocumentPipelineConfig:
        for feature in ("entities", "pii") if self.pii_redaction else ("entities",):
            problem = check_language(feature, self.language)
            if problem:
                raise ValueError(f"language: {problem}")
        return self


class AiServicesConfig(StrictModel):
    api: ApiConfig | None = None
    document_pipeline: DocumentPipelineConfig | None = None
    alarm_emails: list[str] = Field(default_factory=list, max_length=20)
    """Addresses subscribed to the stack's alarm topic (each confirms by e-mail); the topic exists with a
    `document_pipeline`, whose alarms (a failed document, a message in the dead-letter queue) notify it. Subscribe
    other targets (chat, paging) to the topic's ARN, output `AlarmTopicArn`."""

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        return email_addresses("alarm_emails", value)

    @model_validator(mode="after")
    def _something(self) -> AiServicesConfig:
        if self.api is None and self.document_pipeline is None:
            raise ValueError("give api, document_pipeline or both; an empty ai_services section builds nothing")
        return self

    @property
    def services(self) -> list[str]:
        """Managed services the section calls, sorted."""
        used = set(self.api.services if self.api else [])
        if self.document_pipeline is not None:
            used |= {"textract", "comprehend"}
        return sorted(used)

    def check_region(self, region: str) -> list[str]:
        """Cross-section rule: every service used is offered in `env.region`, where the catalog knows."""
        problems = []
        for service in self.services:
            regions = ai_catalog().service(_SERVICE_OF[service]).regions
            if regions is not None and region not in regions:
                problems.append(
                    f"env.region: {service} is not offered in {region!r} (per the AI services catalog); "
                    f"use one of {', '.join(regions)}"
                )
        return problems
