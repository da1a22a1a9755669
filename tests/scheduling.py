"""How pytest-xdist splits the run into work units: one worker runs all of a unit (see tests/conftest.py).

Importable without aws_cdk (importing it starts a jsii kernel): a test runs a nested pytest-xdist run whose
conftest imports only `pytest_xdist_make_scheduler` from here (tests/test_session_synth.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.readers import READERS


def readers_of(nodeid: str) -> list[str]:
    """The checkers whose reports the test reads (a variant module's gate test reads three)."""
    return [name for name, prefixes in READERS.items() if nodeid.startswith(prefixes)]


def reader_of(nodeid: str) -> str | None:
    """The first checker whose report the test reads, if it reads one: the test's work unit is that reader's."""
    return next(iter(readers_of(nodeid)), None)


SHARED_UNITS = {"test_own_app.py": "own-app"}
"""Module file name -> the unit of the modules that share one process's cache: every layer's own-app example runs
in one interpreter, once per process (tests/own_app.py)."""


def work_unit(nodeid: str) -> str:
    """The work unit (one worker runs all of it) of a test, from its node ID: the controller has nothing else."""
    reader = reader_of(nodeid)
    if reader:
        return f"reader-{reader}"
    module = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(module.rsplit("/", 1)[-1], module)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: `-p no:xdist` runs have no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` with `work_unit` as the scope. (pytest-xdist 3.8's `loadgroup` cannot be used: it renames
    node IDs through `Item._nodeid`, which pytest 9 no longer reads, so its groups are silently ignored.)"""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class WorkUnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnitScheduling(config, log)
