"""The hyperpod-eks-teams TrainingClusterStack template of the test session, and lookups by resource type."""

from __future__ import annotations

from typing import Any

import pytest

from tests.synth import Session

NAME = "hyperpod-eks-teams"


def teams_template(session: Session) -> dict[str, Any]:
    """The template, or a skip when the session left the blueprint out."""
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} is not in this session (MLSTACK_TEST_BLUEPRINTS)")
    found: dict[str, Any] = session.blueprints[NAME].templates["TrainingClusterStack"]
    return found


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def one_of_type(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    (item,) = of_type(template, kind).items()
    return item
