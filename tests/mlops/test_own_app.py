"""The SageMaker README's own-app example (keyword props in a plain `cdk.Stack`, no blueprint), run as written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.own_app import resources, run_example


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example("sagemaker", tmp_path_factory.mktemp("own-app"))


def test_example_loads_no_blueprint_schema(result: dict[str, Any]) -> None:
    assert result["schema_modules"] == []


def test_example_builds_the_pipeline_and_the_deploy_function(result: dict[str, Any]) -> None:
    template = result["template"]
    (pipeline,) = resources(template, "AWS::SageMaker::Pipeline")
    assert pipeline["Properties"]["PipelineName"] == "team-pipeline"
    assert len(resources(template, "AWS::Lambda::Function")) >= 1
    assert len(resources(template, "Custom::EndpointReconcile")) == 1
