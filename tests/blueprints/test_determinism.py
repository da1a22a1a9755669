"""Synth is deterministic: the same blueprint gives byte-identical templates in a second, separate App."""

from __future__ import annotations

import pytest

from mlstack.config import BLUEPRINTS_DIR, DEFAULT_BLUEPRINT
from mlstack.synth_all import synthesize_all
from tests.synth import TEST_CONTEXT, Session


def test_default_blueprint_synthesizes_identically_twice(
    session: Session, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if DEFAULT_BLUEPRINT not in session.blueprints:  # MLSTACK_TEST_BLUEPRINTS excluded it while iterating
        return
    again = synthesize_all(
        tmp_path_factory.mktemp("again"),
        [BLUEPRINTS_DIR / f"{DEFAULT_BLUEPRINT}.yaml"],
        extra_context=TEST_CONTEXT,
        nag=False,
    )
    assembly = f"assembly-{DEFAULT_BLUEPRINT}"
    first = sorted((session.outdir / assembly).glob("*.template.json"))
    second = sorted((again.outdir / assembly).glob("*.template.json"))
    assert [p.name for p in first] == [p.name for p in second]
    assert len(first) == len(session.blueprints[DEFAULT_BLUEPRINT].templates)
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
