"""The test run's shared synth (`tests/session_synth.py`), its checkers' end files (`tests/run_files.py`) and the
order `tests/conftest.py` gives the tests for pytest-xdist."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import conftest, run_files
from tests.blueprints import gate_runs
from tests.session_synth import SharedSynth
from tests.synth import Session
from tests.template_checks import background


def test_each_run_end_is_recorded_when_it_comes_and_a_stuck_run_is_killed(tmp_path: Path) -> None:
    quick, slow, stuck = tmp_path / "quick.json", tmp_path / "slow.json", tmp_path / "stuck.json"
    now = time.monotonic()
    runs = {
        quick: (subprocess.Popen(["sh", "-c", "exit 3"]), now),
        slow: (subprocess.Popen(["sleep", "1.5"]), now),
        stuck: (subprocess.Popen(["sleep", "60"]), now),
    }
    # A reader waits while the recorder runs (here a thread; in a test run, the synth's process).
    recorder = threading.Thread(target=run_files.wait_and_record, args=(runs, 3.0))
    recorder.start()
    code, seconds = run_files.wait_for_end(quick, timeout_s=10)
    assert code == 3 and seconds < 1.0
    assert not run_files.end_file(slow).exists()  # the quick run's reader did not wait for the slow one
    assert run_files.wait_for_end(slow, timeout_s=10)[0] == 0
    recorder.join(timeout=20)
    code, seconds = run_files.wait_for_end(stuck, timeout_s=1)
    assert code == -9 and 2.5 < seconds < 10  # killed at the timeout


def test_a_reader_without_an_end_times_out_naming_the_run(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match=r"never\.json: no end after 0 s"):
        run_files.wait_for_end(tmp_path / "never.json", timeout_s=0.2)


def test_this_process_read_the_session_from_the_shared_synth(session: Session, tmp_path: Path) -> None:
    # The workers hold no constructs: the assembly was synthesized in another process and read back from disk.
    assert all(bp.built is None for bp in session.blueprints.values())
    root = session.outdir.parent
    assert (root / "request.json").exists() and (root / "ready.json").exists()
    # The checkers whose readers are selected (all four in `make test`) are that process's runs: here they are
    # ended by file, not held as processes.
    requested = json.loads((root / "request.json").read_text())["checkers"]
    assert set(gate_runs.RUNS) | set(background.RUNS) == set(requested)
    assert all(run.process is None for runs in gate_runs.RUNS.values() for run in runs)
    assert all(run.process is None for run in background.RUNS.values())
    # A second handle on the same run starts nothing (the request is there): one synth per run.
    again = SharedSynth(root, ["network"], [])
    again.start()
    assert again.process is None


def test_a_failed_synth_fails_the_session_with_its_output(tmp_path: Path) -> None:
    synth = SharedSynth(tmp_path / "run", ["no-such-blueprint"], [])
    with pytest.raises(RuntimeError, match=r"(?s)session synth failed.*no-such-blueprint"):
        synth.load()
    synth.finish(abandon=False)
    assert synth.process is not None and synth.process.returncode == 1


@dataclass
class _Item:
    nodeid: str
    fixturenames: tuple[str, ...] = ()
    marks: list[Any] = field(default_factory=list)

    def add_marker(self, mark: Any) -> None:
        self.marks.append(mark)


def test_synth_free_modules_go_first_then_synth_readers_then_the_checkers_readers() -> None:
    items = [
        _Item("tests/a/test_x.py::test_one", ("session",)),
        _Item("tests/a/test_x.py::test_two"),
        _Item("tests/blueprints/test_checkov.py::test_clean", ("session",)),
        _Item("tests/b/test_y.py::test_plain"),
        _Item("tests/blueprints/test_gates.py::test_cfn_lint_finds_no_errors_or_warnings", ("session",)),
        _Item("tests/blueprints/test_gates.py::test_snapshot", ("session",)),
        _Item("tests/c/test_z.py::test_constructs", ("session_and_constructs",)),
    ]
    conftest.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid.split("::")[1] for i in items] == [
        "test_plain",  # the only module with no synth test
        "test_one",
        "test_two",  # a module stays together (its fixtures run once), in its collection order
        "test_snapshot",
        "test_constructs",
        "test_clean",  # the checkers' readers last
        "test_cfn_lint_finds_no_errors_or_warnings",
    ]
    groups = {i.nodeid.split("::")[1]: i.marks[0].kwargs.get("name", i.marks[0].args[0]) for i in items}
    assert groups["test_one"] == groups["test_two"] == "tests/a/test_x.py"
    assert groups["test_cfn_lint_finds_no_errors_or_warnings"] == "reader-cfn-lint"
    assert groups["test_snapshot"] == "tests/blueprints/test_gates.py"
