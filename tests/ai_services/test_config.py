"""The `ai_services:` section: every validator gives one line naming the field, the value and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog.ai_services import ai_catalog
from mlstack.config import load
from mlstack.errors import BlueprintError

BLUEPRINT = Path(__file__).resolve().parents[2] / "blueprints" / "document-ai.yaml"


def _base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BLUEPRINT.read_text())
    data["name"] = "doc-test"
    return data


def _problems(tmp_path: Path, data: dict[str, Any]) -> tuple[str, ...]:
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BlueprintError) as err:
        load(path)
    return err.value.problems


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_base())
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()


def test_shipped_blueprint_loads_with_its_stack() -> None:
    config = load(BLUEPRINT)
    assert config.stack_ids == ["NetworkStack", "AiServicesStack"]
    assert config.ai_services is not None
    assert config.ai_services.services == ["bedrock", "comprehend", "textract"]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # PII detection is English and Spanish only; entities accept the 12 languages.
        (
            "ai_services.document_pipeline.language",
            "fr",
            "ai_services.document_pipeline: language: Comprehend PII detection does not support language 'fr'; "
            "use one of en, es",
        ),
        (
            "ai_services.document_pipeline.language",
            "sv",
            "ai_services.document_pipeline: language: Comprehend entity detection does not support language 'sv'",
        ),
        (
            "ai_services.api.language",
            "fr",
            "ai_services.api: language: Comprehend PII detection does not support language 'fr'",
        ),
        (
            "ai_services.api.bedrock.model_ids",
            ["anthropic.claude-v9"],
            "ai_services.api.bedrock.model_ids: Bedrock model 'anthropic.claude-v9' is not in the AI services catalog",
        ),
        (
            "ai_services.api.bedrock.guardrail",
            {"id": "abc123"},
            "ai_services.api.bedrock.guardrail: version: a guardrail needs a version",
        ),
        ("ai_services.api.auth", "cognito", "auth: cognito needs cognito_user_pool_id and cognito_client_ids"),
        ("ai_services.api.bedrock", _DELETE, "bedrock: give it exactly when bedrock.converse is an operation"),
        ("ai_services.api.operations", ["comprehend.pii", "comprehend.pii"], "an operation is listed twice"),
        ("ai_services.api.operations", ["speech.recognize"], "ai_services.api.operations.0: Input should be"),
        ("ai_services.api.timeout_seconds", 30, "ai_services.api.timeout_seconds:"),
        (
            "ai_services.document_pipeline.textract_features",
            ["TABLES", "FORMS"],
            "ai_services.document_pipeline: textract_features: the pipeline keeps the text only and runs Textract "
            "text detection",
        ),
        ("ai_services.document_pipeline.max_pages", 3001, "ai_services.document_pipeline.max_pages:"),
        ("ai_services", {}, "ai_services: give api, document_pipeline or both"),
        ("ai_services.alarm_emails", ["oncall"], "alarm_emails 'oncall' are not e-mail addresses"),
    ],
)
def test_bad_input_is_one_line_naming_field_and_fix(tmp_path: Path, path: str, value: Any, expected: str) -> None:
    problems = _problems(tmp_path, _with(path, value))
    assert len(problems) == 1
    assert expected in problems[0]
    assert "\n" not in problems[0]


def test_region_where_comprehend_is_not_offered(tmp_path: Path) -> None:
    data = _base()
    data["env"]["region"] = "eu-north-1"
    del data["network"]["availability_zone_ids"]
    (problem,) = _problems(tmp_path, data)
    assert problem.endswith(
        "env.region: comprehend is not offered in 'eu-north-1' (per the AI services catalog); use one of us-east-1, "
        "us-east-2, us-west-2, ap-south-1, ap-northeast-2, ap-southeast-1, ap-southeast-2, ap-northeast-1, "
        "ca-central-1, eu-central-1, eu-west-1, eu-west-2, us-gov-west-1"
    )


def test_french_entities_without_redaction_are_accepted(tmp_path: Path) -> None:
    data = _with("ai_services.document_pipeline.language", "fr")
    data["ai_services"]["document_pipeline"]["pii_redaction"] = False
    del data["ai_services"]["api"]
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load(path)
    assert config.ai_services is not None and config.ai_services.document_pipeline is not None
    assert config.ai_services.document_pipeline.language == "fr"


def test_region_check_only_where_the_catalog_knows_the_regions(tmp_path: Path) -> None:
    # Textract's regions are not in the catalog: an API with only Textract is accepted anywhere.
    assert ai_catalog().service("textract").regions is None
    data = _base()
    data["env"]["region"] = "eu-north-1"
    del data["network"]["availability_zone_ids"]
    data["ai_services"] = {"api": {"operations": ["textract.analyze"]}}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load(path).stack_ids == ["NetworkStack", "AiServicesStack"]


def test_catalog_prices_carry_source_and_a_date_when_known() -> None:
    for price in ai_catalog().prices:
        assert price.source
        assert (price.usd is None) == (price.date is None), price.id
    assert ai_catalog().price("stepfunctions.standard.transition").usd == pytest.approx(0.025 / 1000)
