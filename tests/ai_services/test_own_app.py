"""The AI services README's own-app example (keyword props in a plain `cdk.Stack`, no blueprint), run as written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.own_app import resources, run_example


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example("ai_services", tmp_path_factory.mktemp("own-app"))


def test_example_loads_no_blueprint_schema(result: dict[str, Any]) -> None:
    assert result["schema_modules"] == []


def test_example_builds_the_api_and_the_pipeline(result: dict[str, Any]) -> None:
    template = result["template"]
    routes = sorted(r["Properties"]["RouteKey"] for r in resources(template, "AWS::ApiGatewayV2::Route"))
    assert routes == ["POST /bedrock/converse", "POST /comprehend/sentiment"]
    assert len(resources(template, "AWS::StepFunctions::StateMachine")) == 1
    (table,) = resources(template, "AWS::DynamoDB::Table")
    assert table["DeletionPolicy"] == "RetainExceptOnCreate"
