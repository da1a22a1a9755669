"""Load a shipped EKS serving blueprint with an edit applied, or the one-line problem an edit causes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.errors import BlueprintError

Edit = Callable[[dict[str, Any]], Any] | None


def load_edited(base: dict[str, Any], tmp_path: Path, edit: Edit = None) -> Any:
    """`base` (a blueprint's YAML as data, left unchanged) after `edit`, loaded through the schema (a
    BlueprintConfig; typed Any so that tests reach its optional sections directly)."""
    data = copy.deepcopy(base)
    if edit is not None:
        edit(data)
    path = tmp_path / "serving.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def one_line_problem(base: dict[str, Any], tmp_path: Path, edit: Edit) -> str:
    """The validation error `edit` causes, which must be one line."""
    with pytest.raises(BlueprintError) as err:
        load_edited(base, tmp_path, edit)
    lines = str(err.value).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
