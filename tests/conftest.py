"""Shared fixtures. The expensive one, `session`, synthesizes every blueprint exactly once per test run.

`MLSTACK_TEST_BLUEPRINTS=glob` (e.g. `eks-*`) limits the session to some blueprints while iterating;
`make test` and CI always run them all.

`make test` runs pytest in pytest-xdist workers (`-n 2 --dist loadscope`, the Makefile). The synth runs once per
test run, in a process of its own that the first process to set up a test starts (`tests/session_synth.py`); it
also starts the checkers that read only template files (cfn-lint and checkov: `tests/blueprints/gate_runs.py`;
cfn-guard and asl-validator: `tests/template_checks/background.py`) as soon as it has synthesized. The order
(`pytest_collection_modifyitems`): the modules that need no synth first, so that both workers have work while it
runs; then the modules that read it; then the tests that read the checkers' reports, when those runs are done.
A work unit (`tests/scheduling.py`: `work_unit`, the scheduler `pytest_xdist_make_scheduler` makes) is a module,
the tests that read one checker, or the modules that share one process-wide cache (`SHARED_UNITS`): a unit's
fixtures run once. Each process that runs tests starts its jsii kernel (`tests/kernel_env.py`) and shares one
botocore loader (`tests/botocore_loader.py`) when its session starts; the xdist controller, which runs none, does
neither, so this module imports the synth machinery only where its fixtures run.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests import compile_once, kernel_env, node_cache
from tests.scheduling import pytest_xdist_make_scheduler, reader_of, readers_of  # noqa: F401  (the hook)

if TYPE_CHECKING:
    from tests.session_synth import SharedSynth
    from tests.synth import Session

compile_once.install()  # first: the workers then collect (import) every test module at the same moment
node_cache.share()  # in the first process: the workers inherit it (tests/node_cache.py)


def _xdist_controller(session: pytest.Session) -> bool:
    """Whether this is the pytest-xdist process that hands the tests out to workers and collects none: it has
    xdist's distributing session (registered as "dsession" by xdist's `pytest_configure`, which runs before any
    session starts, and not for `--collect-only`)."""
    return session.config.pluginmanager.has_plugin("dsession")


def pytest_sessionstart(session: pytest.Session) -> None:
    """A process that runs tests (an xdist worker, or a run without xdist) sets up its kernel and botocore's
    loader before it collects, that is before any test module imports aws_cdk or creates a session. The xdist
    controller runs none, so it starts no jsii kernel and imports neither aws_cdk nor mlstack (about 1.5 s of CPU)."""
    if _xdist_controller(session):
        return
    from tests import botocore_loader  # here: it imports botocore

    gc.set_threshold(20_000, *gc.get_threshold()[1:])  # see pytest_collection_finish
    kernel_env.start_kernel()  # the test processes' kernel: no built-in template validation (tests/kernel_env.py)
    botocore_loader.share()  # before any test creates a botocore session (tests/botocore_loader.py)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A process that runs tests moves what collecting them made (every imported module, aws_cdk's generated
    classes and functions among them: most of a worker's objects) out of reach of Python's cycle collector, which
    otherwise walks them all again in each full pass; and (`pytest_sessionstart`) it makes a young-generation pass
    every 20,000 allocations instead of 700, so full passes come less often too. They live as long as the process
    anyway. In a 2-worker run the workers' collector passes took about 12 s of CPU, now about 5 s. The synth does
    the same (`mlstack.synth_all.fewer_gc_passes`)."""
    if not _xdist_controller(session):
        gc.collect()
        gc.freeze()


@pytest.hookimpl(trylast=True)  # after pytest's own last collection, which reports what garbage finalizers raise
def pytest_unconfigure(config: pytest.Config) -> None:
    """The process is about to exit: what the tests left (in-process synths' proxies and templates) is frozen, so
    that the interpreter's teardown does not make full collector passes over it only to free memory the operating
    system takes back (as `mlstack.synth_all.exit_after_synth` does). Small here: pytest's own last collection
    has just run. Two test modules with in-process synths, one process, 3 interleaved pairs: time after the tests
    (start included) 0.93-0.99 -> 0.85-0.97 s (run before pytest's collection, which it then made skip
    everything, it had looked like 1.11-1.54 -> 0.99-1.14 s)."""
    gc.freeze()


def selected_blueprints() -> list[str]:
    from mlstack.config import BLUEPRINTS_DIR

    pattern = os.environ.get("MLSTACK_TEST_BLUEPRINTS", "*")
    return sorted(p.stem for p in BLUEPRINTS_DIR.glob(f"{pattern}.yaml"))


def _reader(item: pytest.Item) -> str | None:
    return reader_of(item.nodeid)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


SYNTH_FIXTURES = {"session", "session_and_constructs", "variants_session", "gated"}
"""The fixtures that read the run's synth: a test that uses one runs after those that use none."""


def _needs_synth(item: pytest.Item) -> bool:
    return not SYNTH_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


LONGEST_FIRST = (
    "tests/training/test_host_agent_failures.py",
    "tests/runtime/test_approval_deploy.py",
    "tests/training/test_cost_guardrails_karpenter.py",
    "tests/cli/test_cdk_cli.py",
    "tests/test_session_synth.py",
    "tests/ai_services/test_own_app.py",
    "tests/access/test_access.py",
    "tests/packaging/test_wheel.py",
)
"""A scheduling hint, not a gate: the modules that took 6-20 s each in a 2-worker run (host drills, moto, the CDK
CLI, a wheel build), started first in their part, so that the part does not end with one worker on a long module
while the other idles (longest-processing-time first). A stale entry only reorders."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules without a `session` test first, then those with one, then the background runs' readers; within
    each part the `LONGEST_FIRST` modules first, then the collection order (the scheduler keeps this order:
    `--no-loadscope-reorder`)."""
    needs_synth = {_module(item) for item in items if _needs_synth(item)}

    def order(item: pytest.Item) -> tuple[int, int]:
        module = _module(item)
        part = 2 if _reader(item) else int(module in needs_synth)
        return part, LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items[:] = sorted(items, key=order)  # stable


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every pytest process of this run shares: pytest-xdist gives each worker a base temp of its
    own under the run's (`<run>/popen-gw0`)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "session"


@pytest.fixture(scope="session", autouse=True)
def shared_synth(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[SharedSynth]:
    """Starts the run's synth with the first test (a cheap no-op where another process did, or where no selected
    test needs it) so that it runs while the tests before the `session` ones do."""
    from tests import variants
    from tests.session_synth import SharedSynth

    items = request.session.items
    checkers = sorted({name for item in items for name in readers_of(item.nodeid)})
    modules = variants.selected_modules(item.nodeid for item in items)
    synth = SharedSynth(_run_root(tmp_path_factory), selected_blueprints(), checkers, modules)
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


@pytest.fixture(scope="session")
def variants_session(shared_synth: SharedSynth) -> Session:
    """The variant blueprints of the selected modules that declare some (`tests/variants.py`)."""
    return shared_synth.load_variants()


@pytest.fixture(scope="session")
def gated(session: Session, shared_synth: SharedSynth) -> Session:
    """Every blueprint the background checkers read: the shipped ones and the variants (where their synth failed,
    the shipped ones: the variants' tests fail with its traceback)."""
    from tests.session_synth import combined

    return combined(session, shared_synth.checked_variants())
