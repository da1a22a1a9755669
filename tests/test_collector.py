"""Python's cycle collector in the processes that run tests (tests/conftest.py): what collecting the tests imported
is frozen, and young-generation passes are rare, so that full passes do not walk aws_cdk's modules again and again;
and in the background checkers (cfn-lint, checkov), run through tests/gc_tuned.py."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

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


def test_the_background_checkers_run_tuned_under_their_own_venvs_python() -> None:
    assert gate_runs.tuned(gate_runs.CFN_LINT) == [
        str(ROOT / ".venv/bin/python"),
        str(gate_runs.GC_TUNED),
        str(gate_runs.CFN_LINT),
    ]
    assert gate_runs.tuned(gate_runs.CHECKOV)[0] == str(ROOT / ".venv-checkov/bin/python")
    assert gate_runs.tuned(Path("/usr/local/bin/no-venv-here")) == ["/usr/local/bin/no-venv-here"]


def test_a_synth_in_a_test_process_leaves_its_freeze_and_threshold() -> None:
    # An in-process synth (synthesize_all) used to gc.unfreeze() everything on its way out: every later test of
    # that worker ran with aws_cdk's modules back in the collector's passes.
    from mlstack.synth_all import fewer_gc_passes

    frozen = gc.get_freeze_count()
    with fewer_gc_passes():
        assert gc.get_threshold()[0] == 20_000
    assert gc.get_freeze_count() >= frozen > 0
    assert gc.get_threshold()[0] == 20_000


def test_a_synth_in_a_process_that_froze_nothing_thaws_what_it_froze() -> None:
    from mlstack.synth_all import fewer_gc_passes

    gc.unfreeze()
    try:
        with fewer_gc_passes():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
    finally:
        gc.freeze()  # this test process's own, as conftest made it
