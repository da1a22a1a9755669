"""Python's cycle collector in the processes that run tests (tests/conftest.py): what collecting the tests imported
is frozen, and young-generation passes are rare, so that full passes do not walk aws_cdk's modules again and again;
and in the background checkers (cfn-lint, checkov), run through tests/gc_tuned.py."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.blueprints import gate_runs
from tests.synth import ROOT


def test_this_test_process_froze_what_it_imported_and_collects_rarely() -> None:
    # pytest and this module alone are tens of thousands of objects (a full run: about a million); unfrozen, 0.
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold()[0] == 20_000


_SHOW = "import gc, json, sys\nprint(json.dumps([__name__, sys.argv, sys.path[0], gc.get_threshold()[0]]))\n"


def test_a_script_run_tuned_sees_what_it_sees_run_alone_but_the_threshold(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "tool"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{_SHOW}")
    script.chmod(0o755)
    alone = json.loads(subprocess.run([str(script), "-f", "x y"], capture_output=True, check=True).stdout)
    command = [sys.executable, str(gate_runs.GC_TUNED), str(script), "-f", "x y"]
    tuned = json.loads(subprocess.run(command, capture_output=True, check=True, cwd=ROOT).stdout)
    assert tuned[:3] == alone[:3] == ["__main__", [str(script), "-f", "x y"], str(script.parent)]
    assert (alone[3], tuned[3]) == (700, 20_000)  # Python's default, then the tuned one


def _script(folder: Path, first_line: str) -> Path:
    script = folder / "tool"
    script.write_text(f"{first_line}\n")
    return script


def test_a_script_runs_tuned_under_the_python_its_first_line_names(tmp_path: Path) -> None:
    script = _script(tmp_path, f"#!{sys.executable}")
    assert gate_runs.tuned(script) == [sys.executable, str(gate_runs.GC_TUNED), str(script)]


@pytest.mark.parametrize(
    "first_line",
    [
        "#!/bin/sh",  # a shell wrapper (pip's, where the venv's path is too long for #!)
        "#!/nowhere/bin/python3",  # a Python that is not there
        "#!/usr/bin/env python3",  # through env: which Python is the PATH's business
        f"#!{sys.executable} -s",  # flags the tuned run would drop
        "\x7fELF",  # a binary
    ],
)
def test_a_script_that_is_not_run_by_a_python_that_exists_runs_alone(tmp_path: Path, first_line: str) -> None:
    script = _script(tmp_path, first_line)
    assert gate_runs.tuned(script) == [str(script)]


def test_the_background_checkers_commands_run_them_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "A.template.json"
    template.write_text("{}")
    monkeypatch.setattr(gate_runs, "template_files", lambda session: {template: ("bp", "Stack", "us-east-1")})
    monkeypatch.setattr(gate_runs.Run, "start", lambda run: run)
    (tmp_path / "lint").mkdir()
    (tmp_path / "scan").mkdir()
    lint, scan = _script(tmp_path / "lint", f"#!{sys.executable}"), _script(tmp_path / "scan", f"#!{sys.executable}")
    monkeypatch.setattr(gate_runs, "CFN_LINT", lint)
    monkeypatch.setattr(gate_runs, "CHECKOV", scan)
    session: Any = None  # template_files, replaced above, is all they read of it
    (cfn_lint,) = gate_runs._start_cfn_lint(session, tmp_path)
    (checkov,) = gate_runs._start_checkov(session, tmp_path)
    assert cfn_lint.args[:3] == [sys.executable, str(gate_runs.GC_TUNED), str(lint)]
    assert checkov.args[:3] == [sys.executable, str(gate_runs.GC_TUNED), str(scan)]


def test_a_synth_in_a_test_process_leaves_its_freeze_and_threshold() -> None:
    # An in-process synth (synthesize_all) used to gc.unfreeze() everything on its way out: every later test of
    # that worker ran with aws_cdk's modules back in the collector's passes.
    from mlstack.synth_all import fewer_gc_passes

    frozen = gc.get_freeze_count()
    assert frozen > 0
    with fewer_gc_passes():
        assert gc.get_threshold()[0] == 20_000
        assert gc.get_freeze_count() == frozen  # nothing more frozen: it would never be collected
    assert gc.get_freeze_count() == frozen
    assert gc.get_threshold()[0] == 20_000


def test_a_synth_in_a_process_that_froze_nothing_thaws_what_it_froze() -> None:
    from mlstack.synth_all import fewer_gc_passes

    gc.unfreeze()
    try:
        with fewer_gc_passes():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
    finally:
        gc.collect()  # this test process's own freeze, as conftest makes it
        gc.freeze()


def test_exiting_after_a_synth_takes_what_is_tracked_out_of_the_collectors_passes() -> None:
    # The entry points (python -m mlstack.synth_all, app.py, the session synth) exit through it.
    from mlstack.synth_all import exit_after_synth

    gc.collect()  # mid-run: what earlier tests left as garbage is not frozen along (it would never be freed)
    before = gc.get_freeze_count()
    left = [[object()] for _ in range(1000)]  # tracked objects made since conftest's freeze
    with pytest.raises(SystemExit) as exited:
        exit_after_synth(3)
    assert exited.value.code == 3
    assert gc.get_freeze_count() >= before + len(left)


def test_a_test_process_freezes_what_the_tests_left_when_it_ends(pytestconfig: pytest.Config) -> None:
    from tests import conftest

    gc.collect()  # as above
    before = gc.get_freeze_count()
    left = [[object()] for _ in range(1000)]
    conftest.pytest_unconfigure(pytestconfig)
    assert gc.get_freeze_count() >= before + len(left)
