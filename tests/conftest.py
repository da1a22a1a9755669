"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once.

`MLSTACK_TEST_BLUEPRINTS=glob` (e.g. `eks-*`) limits the session to some blueprints while iterating;
`make test` and CI always run them all.
"""

from __future__ import annotations

import os

import pytest

from mlstack.config import BLUEPRINTS_DIR
from tests.synth import Session, synthesize
from tests.template_checks import background


def selected_blueprints() -> list[str]:
    pattern = os.environ.get("MLSTACK_TEST_BLUEPRINTS", "*")
    return sorted(p.stem for p in BLUEPRINTS_DIR.glob(f"{pattern}.yaml"))


@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Session:
    files = [BLUEPRINTS_DIR / f"{name}.yaml" for name in selected_blueprints()]
    synthesis = synthesize(tmp_path_factory.mktemp("cdk.out"), files)
    # cfn-guard and asl-validator start now, on the idle core, when a selected test reads their reports.
    background.start_if_selected(synthesis, [item.nodeid for item in request.session.items])
    return synthesis
