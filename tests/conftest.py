"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import Session, synthesize


@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))
