"""Load a blueprint file: YAML -> `BlueprintConfig`, with one clear line per problem.

A bad file never produces a traceback: every problem becomes a line naming the file, the field path, the
bad value and the fix, collected into one `BlueprintError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mlstack import resources, yamlload
from mlstack.config.blueprint import BlueprintConfig
from mlstack.errors import BlueprintError

BLUEPRINTS_DIR = resources.blueprints_dir()
"""The shipped reference architectures (`blueprints/*.yaml` at the repository root; see `mlstack.resources`)."""

DEFAULT_BLUEPRINT = "eks-gpu-training"


def resolve(ref: str, blueprints_dir: Path = BLUEPRINTS_DIR) -> Path:
    """A blueprint name (`eks-gpu-training`) or a path (`./team/my.yaml`) -> the file's path."""
    looks_like_path = "/" in ref or ref.endswith((".yaml", ".yml"))
    path = Path(ref) if looks_like_path else blueprints_dir / f"{ref}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in blueprints_dir.glob("*.yaml"))) or "none"
        raise BlueprintError(
            f"{path}: no such blueprint file; give a path to a YAML file or one of the shipped names: {known}"
        )
    return path


def load(ref: str | Path, blueprints_dir: Path = BLUEPRINTS_DIR) -> BlueprintConfig:
    """Read and validate one blueprint; raises `BlueprintError` with one line per problem."""
    path = ref if isinstance(ref, Path) else resolve(ref, blueprints_dir)
    if not path.is_file():
        raise BlueprintError(f"{path}: no such blueprint file; check the path")
    try:
        raw = yamlload.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = err.problem or "invalid YAML"
        raise BlueprintError(f"{where}: YAML syntax error: {what}; fix the indentation or quoting there") from None
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:
        raise BlueprintError(f"{path}: cannot read the file as YAML ({err}); save it as UTF-8 YAML") from None
    if not isinstance(raw, dict):
        raise BlueprintError(f"{path}: the file must be a YAML mapping (name: ..., network: ...), got {_kind(raw)}")
    raw.setdefault("name", path.stem)
    try:
        return BlueprintConfig.model_validate(raw)
    except ValidationError as err:
        raise BlueprintError(*(format_problem(path, problem) for problem in err.errors())) from None


def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a blueprint file as a user writes it, for editors (`mlstack schema`).

    The model's own schema, except that `name` is optional (`load` defaults it to the file's stem, and every
    shipped blueprint leaves it out) and that `inference:` takes either engine's section.
    """
    schema = BlueprintConfig.model_json_schema()
    schema["required"] = [field for field in schema.get("required", []) if field != "name"]
    schema["properties"]["name"]["description"] = "Defaults to the file name without `.yaml`."
    # `inference:` is either engine's section as written (`inference_eks` is where the loader puts `engine: eks`).
    eks = schema["properties"].pop("inference_eks")["anyOf"][0]
    schema["properties"]["inference"]["anyOf"].insert(1, eks)
    schema["$defs"]["InferenceConfig"]["properties"]["engine"] = {"const": "sagemaker", "default": "sagemaker"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlstack blueprint"
    return schema


def format_problem(path: Path, problem: Any) -> str:
    """One pydantic error -> `file: field.path: problem (got value); fix`."""
    parts = list(problem["loc"])
    if parts[:1] == ["inference_eks"]:  # `inference: {engine: eks}` is validated under its own field
        parts[0] = "inference"
    loc = ".".join(str(part) for part in parts)
    kind = problem["type"]
    value = problem.get("input")
    msg = str(problem["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return f"{path}: {loc}: unknown key; remove it or fix its spelling (see `mlstack schema` for the allowed keys)"
    if kind == "missing":
        return f"{path}: {loc}: required field is missing; add it"
    fix = _FIXES.get(kind)
    where = f"{path}: {loc}:" if loc else f"{path}:"
    # Cross-field checks name their own fields and cannot point at one value.
    text = f"{where} {msg}" if isinstance(value, dict) else f"{where} {msg} (got {_show(value)})"
    return f"{text}; {fix}" if fix else text


_FIXES = {
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "int_from_float": "write a whole number",
    "float_parsing": "write a number, e.g. 7e9",
    "float_type": "write a number, e.g. 7e9",
    "bool_parsing": "write true or false",
    "bool_type": "write true or false",
    "string_type": "quote the value as a string",
    "list_type": "write a YAML list (- item)",
    "dict_type": "write a YAML mapping (key: value)",
    "model_type": "write a YAML mapping (key: value)",
    "model_attributes_type": "write a YAML mapping (key: value)",
    "literal_error": "use one of the values listed",
    "enum": "use one of the values listed",
    "greater_than_equal": "raise the value",
    "greater_than": "raise the value",
    "less_than_equal": "lower the value",
    "less_than": "lower the value",
    "string_pattern_mismatch": "match the pattern shown",
    "string_too_long": "shorten it",
    "string_too_short": "write a non-empty value",
    "ip_v4_network": "write a CIDR such as 10.0.0.0/16 with no host bits set",
}


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list" if len(repr(value)) > 60 else repr(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return "an empty file" if value is None else f"a {type(value).__name__}"
