"""Every shipped blueprint validates against `mlstack schema`, the JSON Schema the README offers to editors.

Editors read YAML 1.2, where `7.0e9` is a number; PyYAML reads YAML 1.1, where it is a string (pydantic then
converts it). The files are read here with YAML 1.2's float rule so that the schema sees what an editor sees.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mlstack.config import BLUEPRINTS_DIR, json_schema


class _Yaml12Floats(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's core-schema float rule (`7.0e9`, `1e-3` are floats)."""


_Yaml12Floats.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def _as_editor_reads(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Floats)  # _Yaml12Floats is a SafeLoader


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", sorted(BLUEPRINTS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_blueprint_validates_against_the_schema(path: Path, validator: jsonschema.Draft202012Validator) -> None:
    errors = [
        f"{'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message[:200]}"
        for e in validator.iter_errors(_as_editor_reads(path))
    ]
    assert errors == []


def test_name_is_optional_because_the_loader_defaults_it(validator: jsonschema.Draft202012Validator) -> None:
    assert validator.is_valid({"description": "a sandbox"})
    assert "name" not in validator.schema["required"]


def test_the_schema_still_rejects_what_the_loader_rejects(validator: jsonschema.Draft202012Validator) -> None:
    assert not validator.is_valid({"name": "x"})  # no description
    assert not validator.is_valid({"description": "d", "netwrok": {}})  # unknown key
    assert not validator.is_valid({"description": "d", "removal": "delete"})
