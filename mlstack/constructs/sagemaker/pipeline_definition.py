"""SageMaker Pipelines definition JSON (version 2020-12-01), built in code and validated offline.

No SageMaker SDK: it calls AWS (region, IAM role simulation, default bucket) while it builds a definition, and synth
must not. The shape follows the public schema linked from the CreatePipeline API reference
(https://aws-sagemaker-mlops.github.io/sagemaker-model-building-pipeline-definition-JSON-schema/): `Version`,
`Metadata`, `Parameters[]`, `Steps[]`; a step is `{Name, Type, Arguments, DependsOn?, PropertyFiles?}`; values
may be expressions `{"Get": "Parameters.X" | "Steps.S.<property>" | "Execution.<variable>"}`,
`{"Std:Join": ...}` and `{"Std:JsonGet": {"PropertyFile": ..., "Path": ...}}`.

`PipelineDefinition.validate()` returns one-line problems (unique step names, references to existing steps,
parameters and properties, parameter types where a job field needs a number, dependency cycles);
`to_json()` raises `PipelineDefinitionError` with the first one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

VERSION = "2020-12-01"
NAME = re.compile(r"^[A-Za-z0-9\-_]{1,64}$")
"""Step, parameter and property-file names (pipeline definition schema)."""
MAX_DEFINITION_CHARS = 1_048_576
"""CreatePipeline's `PipelineDefinition` limit."""

ParameterType = Literal["String", "Integer", "Float", "Boolean"]
StepType = Literal["Processing", "Training", "Condition", "RegisterModel", "Transform"]
Comparison = Literal["GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo", "Equals", "NotEquals"]

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "String": (str,),
    "Integer": (int,),
    "Float": (int, float),
    "Boolean": (bool,),
}
_INTEGER_FIELDS = frozenset(
    {"InstanceCount", "VolumeSizeInGB", "MaxRuntimeInSeconds", "MaxWaitTimeInSeconds", "MaxConcurrentTransforms"}
)
"""Job-request fields that take an integer: a parameter used there must be an Integer parameter."""
_STRING_FIELDS = frozenset({"InstanceType", "S3Uri", "S3OutputPath", "ModelApprovalStatus", "ModelDataUrl"})
_EXECUTION = frozenset(
    {"PipelineExecutionId", "PipelineExecutionArn", "PipelineName", "PipelineArn", "StartDateTime", "CurrentDateTime"}
)
_STEP_PROPERTIES: dict[str, tuple[str, ...]] = {
    "Training": (
        "TrainingJobName",
        "TrainingJobArn",
        "TrainingJobStatus",
        "ModelArtifacts.S3ModelArtifacts",
        "OutputDataConfig.S3OutputPath",
        "CheckpointConfig.S3Uri",
    ),
    "Processing": ("ProcessingJobName", "ProcessingJobArn", "ProcessingJobStatus"),
    "Transform": ("TransformJobName", "TransformJobArn", "TransformOutput.S3OutputPath"),
    "RegisterModel": ("ModelPackageArn", "ModelPackageName", "ModelPackageVersion", "ModelApprovalStatus"),
    "Condition": ("Outcome",),
}
"""Properties a step of each type exposes to later steps (DescribeXJob response fields the service resolves)."""
_OUTPUT_URI = re.compile(r"^ProcessingOutputConfig\.Outputs\['([^']+)'\]\.S3Output\.S3Uri$")
_METRIC = re.compile(r"^FinalMetricDataList\['([^']+)'\]\.Value$")


class PipelineDefinitionError(ValueError):
    """A definition SageMaker would reject or run wrongly; the message is one line."""


@dataclass(frozen=True)
class Parameter:
    """A pipeline parameter: overridable per execution, `default` used otherwise."""

    name: str
    type: ParameterType
    default: str | int | float | bool

    @property
    def ref(self) -> dict[str, str]:
        """`{"Get": "Parameters.<name>"}`: the value at execution time."""
        return {"Get": f"Parameters.{self.name}"}

    def to_json(self) -> dict[str, Any]:
        return {"Name": self.name, "Type": self.type, "DefaultValue": self.default}


@dataclass(frozen=True)
class PropertyFile:
    """A JSON file a processing step writes to one of its outputs; `Std:JsonGet` reads values from it."""

    name: str
    output_name: str
    path: str


@dataclass
class Step:
    """One step: `arguments` is the service request (CreateTrainingJob etc. without the job name)."""

    name: str
    type: StepType
    arguments: dict[str, Any]
    depends_on: list[str] = field(default_factory=list)
    property_files: list[PropertyFile] = field(default_factory=list)

    def prop(self, path: str) -> dict[str, str]:
        """`{"Get": "Steps.<name>.<path>"}`, e.g. `train.prop("ModelArtifacts.S3ModelArtifacts")`."""
        return {"Get": f"Steps.{self.name}.{path}"}

    def output_uri(self, output_name: str) -> dict[str, str]:
        """Where a processing step wrote its output `output_name`."""
        return self.prop(f"ProcessingOutputConfig.Outputs['{output_name}'].S3Output.S3Uri")

    def json_get(self, property_file: str, path: str) -> dict[str, Any]:
        """A value read at execution time from this step's property file (`Std:JsonGet`)."""
        return {
            "Std:JsonGet": {"PropertyFile": {"Get": f"Steps.{self.name}.PropertyFiles.{property_file}"}, "Path": path}
        }

    def children(self) -> list[Step]:
        return []

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"Name": self.name, "Type": self.type, "Arguments": self.arguments}
        if self.depends_on:
            data["DependsOn"] = list(self.depends_on)
        if self.property_files:
            data["PropertyFiles"] = [
                {"PropertyFileName": f.name, "OutputName": f.output_name, "FilePath": f.path}
                for f in self.property_files
            ]
        return data


@dataclass(frozen=True)
class Condition:
    """`left <comparison> right`; each side a literal or an expression (parameter, property, JsonGet)."""

    comparison: Comparison
    left: Any
    right: Any

    def to_json(self) -> dict[str, Any]:
        return {"Type": self.comparison, "LeftValue": self.left, "RightValue": self.right}


class ConditionStep(Step):
    """Runs `if_steps` when every condition holds, else `else_steps` (both nested in the definition)."""

    def __init__(
        self,
        name: str,
        *,
        conditions: Sequence[Condition],
        if_steps: Sequence[Step] = (),
        else_steps: Sequence[Step] = (),
        depends_on: Sequence[str] = (),
    ) -> None:
        super().__init__(name=name, type="Condition", arguments={}, depends_on=list(depends_on))
        self.conditions = list(conditions)
        self.if_steps = list(if_steps)
        self.else_steps = list(else_steps)

    def children(self) -> list[Step]:
        return [*self.if_steps, *self.else_steps]

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["Arguments"] = {
            "Conditions": [c.to_json() for c in self.conditions],
            "IfSteps": [s.to_json() for s in self.if_steps],
            "ElseSteps": [s.to_json() for s in self.else_steps],
        }
        return data


@dataclass
class PipelineDefinition:
    """Parameters and steps; `to_json()` is the document `AWS::SageMaker::Pipeline` takes (after json.dumps)."""

    parameters: list[Parameter]
    steps: list[Step]
    metadata: dict[str, str] = field(default_factory=dict)

    def all_steps(self) -> Iterator[Step]:
        """Every step, including those nested in condition steps (names share one namespace)."""
        stack = list(reversed(self.steps))
        while stack:
            step = stack.pop()
            yield step
            stack.extend(reversed(step.children()))

    def to_json(self) -> dict[str, Any]:
        problems = self.validate()
        if problems:
            raise PipelineDefinitionError(problems[0])
        return {
            "Version": VERSION,
            "Metadata": dict(self.metadata),
            "Parameters": [p.to_json() for p in self.parameters],
            "Steps": [s.to_json() for s in self.steps],
        }

    def validate(self) -> list[str]:
        """One line per problem, in a stable order (empty: SageMaker's structural checks would pass)."""
        problems: list[str] = []
        params = self._check_parameters(problems)
        steps: dict[str, Step] = {}
        for step in self.all_steps():
            if not NAME.match(step.name):
                problems.append(f"step {step.name!r}: name must match {NAME.pattern} (letters, digits, - and _)")
            if step.name in steps:
                problems.append(f"step {step.name!r}: duplicate step name; every step needs its own name")
            steps[step.name] = step
        for step in self.all_steps():
            for dep in step.depends_on:
                if dep not in steps:
                    problems.append(f"step {step.name!r}: DependsOn {dep!r} is not a step of this pipeline")
            args = step.arguments if not isinstance(step, ConditionStep) else _condition_args(step)
            for key, ref in _references(args):
                problems += _check_reference(step.name, key, ref, params, steps)
        problems += _cycles(self.all_steps())
        return problems

    def _check_parameters(self, problems: list[str]) -> dict[str, Parameter]:
        params: dict[str, Parameter] = {}
        for p in self.parameters:
            if not NAME.match(p.name):
                problems.append(f"parameter {p.name!r}: name must match {NAME.pattern}")
            if p.name in params:
                problems.append(f"parameter {p.name!r}: defined twice")
            expected = _PYTHON_TYPES.get(p.type)
            if expected is None:
                problems.append(f"parameter {p.name!r}: type {p.type!r} is not one of String, Integer, Float, Boolean")
            elif not isinstance(p.default, expected) or (p.type != "Boolean" and isinstance(p.default, bool)):
                problems.append(
                    f"parameter {p.name!r}: default {p.default!r} is not a {p.type}; give a {p.type} default"
                )
            params[p.name] = p
        return params


def _condition_args(step: ConditionStep) -> dict[str, Any]:
    # Only the conditions: nested steps are checked as steps of their own.
    return {"Conditions": [c.to_json() for c in step.conditions]}


def _references(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every `Get` (and JsonGet property-file reference) in `value`, with the request field it sits under."""
    if isinstance(value, Mapping):
        get = value.get("Get")
        if len(value) == 1 and isinstance(get, str):
            yield key, get
            return
        for k, v in value.items():
            yield from _references(v, k if k not in ("Std:JsonGet", "Std:Join", "PropertyFile", "Values") else key)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _references(item, key)


def _check_reference(
    where: str, key: str, ref: str, params: Mapping[str, Parameter], steps: Mapping[str, Step]
) -> list[str]:
    head, _, rest = ref.partition(".")
    if head == "Parameters":
        param = params.get(rest)
        if param is None:
            return [f"step {where!r}: {ref} is not a parameter of this pipeline (parameters: {', '.join(params)})"]
        if key in _INTEGER_FIELDS and param.type != "Integer":
            return [f"step {where!r}: {key} takes an integer but {ref} is a {param.type} parameter; make it Integer"]
        if key in _STRING_FIELDS and param.type != "String":
            return [f"step {where!r}: {key} takes a string but {ref} is a {param.type} parameter; make it String"]
        return []
    if head == "Execution":
        return [] if rest in _EXECUTION else [f"step {where!r}: {ref} is not an execution variable"]
    if head != "Steps":
        return [f"step {where!r}: {ref!r} must start with Parameters., Steps. or Execution."]
    name, _, path = rest.partition(".")
    target = steps.get(name)
    if target is None:
        return [f"step {where!r}: {ref} refers to step {name!r}, which is not in this pipeline"]
    if name == where:
        return [f"step {where!r}: {ref} refers to the step itself"]
    return _check_property(where, ref, target, path)


def _check_property(where: str, ref: str, target: Step, path: str) -> list[str]:
    if path.startswith("PropertyFiles."):
        names = [f.name for f in target.property_files]
        if path.removeprefix("PropertyFiles.") in names:
            return []
        return [f"step {where!r}: {ref}: step {target.name!r} declares no such property file (has: {names or 'none'})"]
    if target.type == "Processing":
        match = _OUTPUT_URI.match(path)
        if match:
            outputs = [o["OutputName"] for o in target.arguments.get("ProcessingOutputConfig", {}).get("Outputs", [])]
            if match[1] in outputs:
                return []
            return [f"step {where!r}: {ref}: step {target.name!r} has no output {match[1]!r} (outputs: {outputs})"]
    if target.type == "Training" and _METRIC.match(path):
        return []
    if path in _STEP_PROPERTIES[target.type]:
        return []
    known = ", ".join(_STEP_PROPERTIES[target.type])
    return [f"step {where!r}: {ref}: {path!r} is not a property of a {target.type} step (known: {known})"]


def _cycles(steps: Iterator[Step]) -> list[str]:
    """A step that (through DependsOn or data references) waits for itself never runs."""
    edges: dict[str, set[str]] = {}
    for step in steps:
        args = step.arguments if not isinstance(step, ConditionStep) else _condition_args(step)
        refs = {ref.split(".")[1] for _, ref in _references(args) if ref.startswith("Steps.")}
        edges[step.name] = refs | set(step.depends_on)
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> list[str]:
        if state.get(name) == 1:
            cycle = [*path[path.index(name) :], name]
            return [f"steps {' -> '.join(cycle)}: dependency cycle; remove one DependsOn or reference"]
        if state.get(name) == 2 or name not in edges:
            return []
        state[name] = 1
        for nxt in sorted(edges[name]):
            found = visit(nxt, [*path, name])
            if found:
                return found
        state[name] = 2
        return []

    for name in edges:
        found = visit(name, [])
        if found:
            return found
    return []
