"""mlstack.yamlload: the C parser's values are the pure-Python loader's, and so are its errors."""

from __future__ import annotations

import copy

import pytest
import yaml

from mlstack import resources, yamlload
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.k8s import job


def test_every_shipped_blueprint_and_the_catalogs_load_to_the_same_values() -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(BLUEPRINTS_DIR.glob("*.yaml"))]
    catalogs = ("instances", "ai_services", "serving_efficiency", "dlc_registries", "sagemaker_images")
    texts += [resources.catalog_text(f"{name}.yaml") for name in catalogs]
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


def test_the_job_template_loads_to_the_same_documents() -> None:
    text = job.TEMPLATE.read_text(encoding="utf-8")
    assert yamlload.safe_load_all(text) == list(yaml.safe_load_all(text)) == list(job._template_docs())


def test_rendering_every_shipped_job_leaves_the_parsed_template_as_it_was() -> None:
    # The template is parsed once per process (job._template_docs): a renderer that changed it in place would change
    # every later job of the process.
    before = copy.deepcopy(job._template_docs())
    configs = [load(path) for path in sorted(BLUEPRINTS_DIR.glob("*.yaml"))]
    rendered = [job.render_job(c) for c in configs if c.training and c.training.engine in ("eks", "hyperpod-eks")]
    assert len(rendered) >= 5
    assert job._template_docs() == before
