"""The test run's shared synth (`tests/session_synth.py`), its checkers' end files (`tests/run_files.py`) and the
order `tests/conftest.py` gives the tests for pytest-xdist."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import conftest, run_files, scheduling, variants
from tests.blueprints import gate_runs
from tests.session_synth import SharedSynth
from tests.synth import ROOT, Session
from tests.template_checks import background


def test_each_run_end_is_recorded_when_it_comes_and_a_stuck_run_is_killed(tmp_path: Path) -> None:
    quick, slow, stuck = tmp_path / "quick.json", tmp_path / "slow.json", tmp_path / "stuck.json"
    go = tmp_path / "go"
    now = time.monotonic()
    runs = {
        quick: (subprocess.Popen(["sh", "-c", "exit 3"]), now),
        # Ends only once the test says so: no timing in the test.
        slow: (subprocess.Popen(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]), now),
        # Started, as far as the recorder knows, long past the timeout: killed on its first look.
        stuck: (subprocess.Popen(["sleep", "600"]), now - 1000),
    }
    # A reader waits while the recorder runs (here a thread; in a test run, the synth's process).
    recorder = threading.Thread(target=run_files.wait_and_record, args=(runs, 600.0))
    recorder.start()
    assert run_files.wait_for_end(quick, timeout_s=60)[0] == 3
    assert not run_files.end_file(slow).exists()  # the quick run's reader did not wait for the slow one
    go.touch()
    assert run_files.wait_for_end(slow, timeout_s=60)[0] == 0
    recorder.join(timeout=60)
    assert not recorder.is_alive()
    code, seconds = run_files.wait_for_end(stuck, timeout_s=1)
    assert code == -9 and seconds >= 1000  # killed, its time counted from its own start


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


def test_a_failed_variant_synth_fails_the_variants_and_leaves_the_shipped_session(tmp_path: Path) -> None:
    synth = SharedSynth(tmp_path / "run", [], [], ["tests/no_such_variants.py"])
    shipped, _ = synth.load()
    assert shipped.blueprints == {}
    assert synth.checked_variants() is None  # the checkers read the shipped templates only
    with pytest.raises(RuntimeError, match=r"(?s)variants' synth failed.*no_such_variants"):
        synth.load_variants()
    synth.finish(abandon=False)
    assert synth.process is not None and synth.process.returncode == 0


def test_every_variant_has_a_name_of_its_own_and_builds_that_blueprint() -> None:
    found = variants.builders(variants.MODULES)  # a name taken twice, or by a shipped blueprint, fails here
    assert len(found) >= 10
    assert all(build().name == name for name, build in found.items())


def test_each_variant_module_has_a_gate_test_that_reads_the_three_checkers() -> None:
    for module in variants.MODULES:
        tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
        assert variants.GATE_TEST in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, module
        assert scheduling.readers_of(f"{module}::{variants.GATE_TEST}") == ["cfn-lint", "checkov", "cfn-guard"]
    assert scheduling.readers_of("tests/training/test_cost_guardrails.py::test_other") == []


def test_variants_are_synthesized_for_the_selected_modules_that_declare_them() -> None:
    selected = ["tests/inference_eks/test_variants.py::test_x[a]", "tests/blueprints/test_gates.py::test_y"]
    assert variants.selected_modules(selected) == ["tests/inference_eks/test_variants.py"]
    assert variants.selected_modules(["tests/test_kernel.py::test_z"]) == []


@dataclass
class _Item:
    nodeid: str
    fixturenames: tuple[str, ...] = ()


def test_synth_free_modules_go_first_then_synth_readers_then_the_checkers_readers() -> None:
    items = [
        _Item("tests/a/test_x.py::test_one", ("session",)),
        _Item("tests/a/test_x.py::test_two"),
        _Item("tests/blueprints/test_checkov.py::test_clean", ("session",)),
        _Item("tests/b/test_y.py::test_plain"),
        _Item("tests/blueprints/test_gates.py::test_cfn_lint_finds_no_errors_or_warnings", ("session",)),
        _Item("tests/blueprints/test_gates.py::test_snapshot", ("session",)),
        _Item("tests/c/test_z.py::test_constructs", ("session_and_constructs",)),
        _Item("tests/cli/test_cdk_cli.py::test_long"),
    ]
    conftest.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid.split("::")[1] for i in items] == [
        "test_long",  # a long module starts its part
        "test_plain",
        "test_one",
        "test_two",  # a module stays together, in its collection order
        "test_snapshot",
        "test_constructs",
        "test_clean",  # the checkers' readers last
        "test_cfn_lint_finds_no_errors_or_warnings",
    ]


def test_a_work_unit_is_a_module_a_checkers_readers_or_a_shared_cache() -> None:
    unit = scheduling.work_unit
    assert unit("tests/a/test_x.py::test_one") == unit("tests/a/test_x.py::test_two[p-1]") == "tests/a/test_x.py"
    assert unit("tests/blueprints/test_gates.py::test_cfn_lint_finds_no_errors_or_warnings") == "reader-cfn-lint"
    assert unit("tests/blueprints/test_gates.py::test_snapshot[x]") == "tests/blueprints/test_gates.py"
    assert unit("tests/blueprints/test_checkov.py::test_clean") == "reader-checkov"
    # Every layer's own-app example runs in one interpreter per process: one unit, so one run per test run.
    assert unit("tests/network/test_own_app.py::test_a") == unit("tests/mlops/test_own_app.py::test_b") == "own-app"


def test_the_scheduler_keeps_each_unit_on_one_worker(tmp_path: Path) -> None:
    # The real pytest-xdist run with conftest's scheduler: the two own-app modules (one unit; plain loadscope would
    # give each module a worker of its own) run in one worker, and a module in one worker.
    for module in ("a/test_own_app.py", "b/test_own_app.py", "c/test_other.py"):
        label = module.replace("/", "-")
        write = f"(pathlib.Path(__file__).parents[1] / 'ran-{label}-{{0}}').write_text(os.environ['WORKER'])"
        body = "import os, pathlib\nos.environ.setdefault('WORKER', os.environ.get('PYTEST_XDIST_WORKER', '-'))\n"
        body += "".join(f"def test_{i}():\n    {write.format(i)}\n" for i in range(4))
        (tmp_path / module).parent.mkdir()
        (tmp_path / module).write_text(body)
    (tmp_path / "conftest.py").write_text("from tests.scheduling import pytest_xdist_make_scheduler  # noqa: F401\n")
    common = ["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir", str(tmp_path), "-c", "/dev/null"]
    args = [sys.executable, "-m", "pytest", *common, "-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([*args, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ran = {path.name.removeprefix("ran-"): path.read_text() for path in tmp_path.glob("ran-*")}
    assert len(ran) == 12
    own_app = {worker for name, worker in ran.items() if "test_own_app" in name}
    other = {worker for name, worker in ran.items() if "test_other" in name}
    assert len(own_app) == 1 and len(other) == 1, ran
    # Without pytest-xdist the hook is unknown: it is optional, so a one-process run still starts.
    plain = [sys.executable, "-m", "pytest", *common, "-p", "no:xdist"]
    run = subprocess.run([*plain, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_the_scheduler_imports_no_aws_cdk() -> None:
    # The nested run above imports only the scheduler: importing aws_cdk would start a jsii kernel in each of its
    # three processes (about 8 s of CPU per test run).
    code = "import sys, tests.scheduling; print(sorted(m for m in sys.modules if m.startswith(('aws_cdk', 'jsii'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


def test_the_longest_first_hint_names_modules_that_exist() -> None:
    assert [m for m in conftest.LONGEST_FIRST if not (ROOT / m).is_file()] == []


def test_make_caches_bytecode_outside_the_sources_even_where_the_environment_turns_it_off() -> None:
    # Each Python process of a test run would otherwise compile aws-cdk-lib's modules from source again.
    show = 'show: ; @echo "[$${PYTHONDONTWRITEBYTECODE-unset}][$${PYTHONPYCACHEPREFIX}]"'
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    args = ["make", "-s", "--no-print-directory", "-C", str(ROOT), "--eval", show, "show"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, check=True)
    assert run.stdout.strip() == f"[unset][{ROOT / '.pycache'}]"
