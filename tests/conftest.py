"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once.

`MLSTACK_TEST_BLUEPRINTS=glob` (e.g. `eks-*`) limits the session to some blueprints while iterating;
`make test` and CI always run them all.
"""

from __future__ import annotations

import os

import pytest

from mlstack.config import BLUEPRINTS_DIR
from tests.synth import Session, synthesize


def selected_blueprints() -> list[str]:
    pattern = os.environ.get("MLSTACK_TEST_BLUEPRINTS", "*")
    return sorted(p.stem for p in BLUEPRINTS_DIR.glob(f"{pattern}.yaml"))


@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    files = [BLUEPRINTS_DIR / f"{name}.yaml" for name in selected_blueprints()]
    return synthesize(tmp_path_factory.mktemp("cdk.out"), files)
