"""The data `mlstack access` works on: principals, their uses and facts, and SageMaker pipeline values.

A `Use` is one thing a role does at run time (a kind from `calls.KINDS`, a description, the facts its calls
are made of); a `Principal` is a role with its uses. `pipeline_value` evaluates a pipeline definition's
`Get` / `Std:Join` expressions for one example execution.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Facts = dict[str, list[dict[str, str]]]
EXECUTION_ID = "execution-id"


@dataclass
class Use:
    kind: str
    what: str
    facts: Facts


@dataclass
class Principal:
    stack: str
    logical_id: str
    arn: str
    uses: list[Use] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.stack.rsplit('-', 1)[-1]}/{self.logical_id}"


def merge(*parts: Facts) -> Facts:
    merged: Facts = {}
    for part in parts:
        for key, items in part.items():
            bucket = merged.setdefault(key, [])
            bucket.extend(i for i in items if i not in bucket)
    return merged


def pipeline_value(value: Any, steps: dict[str, dict[str, Any]], parameters: dict[str, Any]) -> Any:
    """A SageMaker pipeline definition value with `Get`, `Std:Join` evaluated for one example execution."""
    if isinstance(value, list):
        return [pipeline_value(v, steps, parameters) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Get"}:
        path = str(value["Get"])
        if path == "Execution.PipelineExecutionId":
            return EXECUTION_ID
        if path.startswith("Parameters."):
            return parameters.get(path.split(".", 1)[1], path)
        if path.startswith("Steps."):
            return _step_property(path, steps, parameters)
        return path
    if set(value) == {"Std:Join"}:
        join = value["Std:Join"]
        return str(join["On"]).join(str(pipeline_value(v, steps, parameters)) for v in join["Values"])
    return {k: pipeline_value(v, steps, parameters) for k, v in value.items()}


def _step_property(path: str, steps: dict[str, dict[str, Any]], parameters: dict[str, Any]) -> str:
    _, step, rest = path.split(".", 2)
    args = steps[step].get("Arguments", {})
    if rest.startswith("ProcessingOutputConfig.Outputs["):
        name = rest.split("['", 1)[1].split("']", 1)[0]
        for output in args["ProcessingOutputConfig"]["Outputs"]:
            if output["OutputName"] == name:
                return str(pipeline_value(output["S3Output"]["S3Uri"], steps, parameters))
    if rest == "ModelArtifacts.S3ModelArtifacts":
        base = pipeline_value(args["OutputDataConfig"]["S3OutputPath"], steps, parameters)
        return f"{base}/pipelines-{EXECUTION_ID}-{step.lower()}/output/model.tar.gz"
    return path


def pipeline_steps(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every step by name, including the steps inside condition branches."""
    found: dict[str, dict[str, Any]] = {}

    def walk(steps: list[dict[str, Any]]) -> None:
        for step in steps:
            found[step["Name"]] = step
            args = step.get("Arguments", {})
            walk(args.get("IfSteps", []) + args.get("ElseSteps", []))

    walk(definition.get("Steps", []))
    return found


def json_gets(value: Any) -> list[str]:
    """The property-file references (`Steps.X.PropertyFiles.Y`) that `Std:JsonGet` reads."""
    text = json.dumps(value)
    refs: list[str] = []
    start = 0
    while (at := text.find('"Std:JsonGet"', start)) >= 0:
        start = at + 1
        marker = text.find('"Get": "', at)
        if marker >= 0:
            refs.append(text[marker + 8 : text.find('"', marker + 8)])
    return refs
