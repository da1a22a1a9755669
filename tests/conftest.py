"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once per test run.

`MLSTACK_TEST_BLUEPRINTS=glob` (e.g. `eks-*`) limits the session to some blueprints while iterating;
`make test` and CI always run them all.

`make test` runs pytest in two pytest-xdist workers (`-n 2 --dist loadgroup`, the Makefile). The synth runs once per
test run, in a process of its own that the first process to set up a test starts (`tests/session_synth.py`); it
also starts the checkers that read only template files (cfn-lint and checkov: `tests/blueprints/gate_runs.py`;
cfn-guard and asl-validator: `tests/template_checks/background.py`) as soon as it has synthesized. The order
(`pytest_collection_modifyitems`): the modules that need no synth first, so that both workers have work while it
runs; then the modules that read it; then the tests that read the checkers' reports, when those runs are done.
Each module is one work unit (an `xdist_group`), so a module's own fixtures (a variant synth) run once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import BLUEPRINTS_DIR
from tests.session_synth import READERS, SharedSynth
from tests.synth import Session


def selected_blueprints() -> list[str]:
    pattern = os.environ.get("MLSTACK_TEST_BLUEPRINTS", "*")
    return sorted(p.stem for p in BLUEPRINTS_DIR.glob(f"{pattern}.yaml"))


def _reader(item: pytest.Item) -> str | None:
    return next((name for name, prefix in READERS.items() if item.nodeid.startswith(prefix)), None)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _needs_synth(item: pytest.Item) -> bool:
    return not {"session", "session_and_constructs"}.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers the marker only when it is loaded (`-p no:xdist` runs keep working).
    config.addinivalue_line("markers", "xdist_group(name): tests that one pytest-xdist worker runs together")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns the groups into node ID suffixes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules without a `session` test first, then those with one, then the background runs' readers (each
    checker's readers one group); within each part the collection order. Every other module is one group."""
    needs_synth = {_module(item) for item in items if _needs_synth(item)}

    def part(item: pytest.Item) -> int:
        return 2 if _reader(item) else int(_module(item) in needs_synth)

    items[:] = sorted(items, key=part)  # stable: the collection order within each part
    for item in items:
        reader = _reader(item)
        item.add_marker(pytest.mark.xdist_group(f"reader-{reader}" if reader else _module(item)))


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every pytest process of this run shares: pytest-xdist gives each worker a base temp of its
    own under the run's (`<run>/popen-gw0`)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "session"


@pytest.fixture(scope="session", autouse=True)
def shared_synth(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[SharedSynth]:
    """Starts the run's synth with the first test (a cheap no-op where another process did, or where no selected
    test needs it) so that it runs while the tests before the `session` ones do."""
    items = request.session.items
    checkers = sorted({name for item in items if (name := _reader(item))})
    synth = SharedSynth(_run_root(tmp_path_factory), selected_blueprints(), checkers)
    if any(_needs_synth(item) for item in items):
        synth.start()
    yield synth
    synth.finish(abandon=bool(request.session.shouldstop or request.session.shouldfail))


@pytest.fixture(scope="session")
def session_and_constructs(shared_synth: SharedSynth) -> tuple[Session, dict[str, dict[str, dict[str, Any]]]]:
    return shared_synth.load()


@pytest.fixture(scope="session")
def session(session_and_constructs: tuple[Session, dict[str, dict[str, dict[str, Any]]]]) -> Session:
    return session_and_constructs[0]
