"""mlstack.yamlload: the C parser's values are the pure-Python loader's, and so are its errors."""

from __future__ import annotations

import pytest
import yaml

from mlstack import resources, yamlload
from mlstack.config import BLUEPRINTS_DIR


def test_every_shipped_blueprint_and_the_catalog_load_to_the_same_values() -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(BLUEPRINTS_DIR.glob("*.yaml"))]
    texts.append(resources.catalog_text("instances.yaml"))
    for text in texts:
        assert yamlload.safe_load(text) == yaml.safe_load(text)


def test_a_rejected_document_fails_with_the_pure_python_error() -> None:
    bad = "training:\n  engine: eks\n   cluster: {}\n"
    with pytest.raises(yaml.MarkedYAMLError) as expected:
        yaml.safe_load(bad)
    with pytest.raises(yaml.MarkedYAMLError) as got:
        yamlload.safe_load(bad)
    assert str(got.value) == str(expected.value)


def test_it_refuses_what_safe_load_refuses() -> None:
    with pytest.raises(yaml.constructor.ConstructorError):
        yamlload.safe_load("!!python/object:os.system {}")
