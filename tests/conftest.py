"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once.

`MLSTACK_TEST_BLUEPRINTS=glob` (e.g. `eks-*`) limits the session to some blueprints while iterating;
`make test` and CI always run them all.

Right after the synth, the checkers that read only template files start in background processes (cfn-lint and
checkov: `tests/blueprints/gate_runs.py`; cfn-guard and asl-validator: `tests/template_checks/background.py`),
so they run on the second core while this process runs the other tests; the tests that read their reports run
last (`pytest_collection_modifyitems`), when the runs are done.
"""

from __future__ import annotations

import os

import pytest

from mlstack.config import BLUEPRINTS_DIR
from tests.blueprints import gate_runs
from tests.synth import Session, synthesize
from tests.template_checks import background

_BACKGROUND_READERS = (*gate_runs.READERS.values(), *background.READERS.values())


def selected_blueprints() -> list[str]:
    pattern = os.environ.get("MLSTACK_TEST_BLUEPRINTS", "*")
    return sorted(p.stem for p in BLUEPRINTS_DIR.glob(f"{pattern}.yaml"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The readers of background runs go last, in their own order; every other test keeps its place."""
    readers = [item for item in items if item.nodeid.startswith(_BACKGROUND_READERS)]
    items[:] = [item for item in items if not item.nodeid.startswith(_BACKGROUND_READERS)] + readers


@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Session:
    files = [BLUEPRINTS_DIR / f"{name}.yaml" for name in selected_blueprints()]
    synthesis = synthesize(tmp_path_factory.mktemp("cdk.out"), files)
    selected = [item.nodeid for item in request.session.items]
    gate_runs.start_if_selected(synthesis, selected)
    background.start_if_selected(synthesis, selected)
    return synthesis
