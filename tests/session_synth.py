"""The test run's one synth of every blueprint, in a process of its own, shared by every pytest process of the run.

`make test` runs pytest in two pytest-xdist workers (two CPUs busy instead of one); most tests need the synthesized
blueprints (the `session` fixture), and no worker should wait for them while it still has tests that do not. So
the first worker to set up its first test starts this module as a subprocess (a file lock in the run's shared temp
directory decides which): it synthesizes the selected blueprints into `<root>/cdk.out` (`synthesize_all` with the
test context, nag on, as always), starts the background checkers whose reading tests are selected (cfn-lint and
checkov, `tests/blueprints/gate_runs.py`; cfn-guard and asl-validator, `tests/template_checks/background.py`),
announces the assembly in `<root>/ready.json`, and records each checker's end as it comes (`tests/run_files.py`).
Every worker reads the assembly back from disk (`mlstack.synth_all.read_synthesis`) and the checkers' reports from
their files: one synth and one run of each checker per test run, however many workers.

Then it synthesizes the variant blueprints of the selected modules that declare some (`tests/variants.py`) into
`<root>/cdk.out-variants`, and the checkers read their templates in the same runs. A failed variant synth fails
only the tests that read the variants (`load_variants`); the checkers then read the shipped templates.

    python -m tests.session_synth ROOT --blueprints a,b [--checkers cfn-lint,checkov] [--variants MODULE,...]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.synth_all import Synthesis, exit_after_synth, read_synthesis
from tests import readers, run_files, variants
from tests.blueprints import gate_runs
from tests.synth import ROOT, Session, synthesize
from tests.template_checks import background, node_tools

READERS = readers.READERS
"""Checker -> the tests (node ID prefixes) that read its report."""

TIMEOUT_S = 900.0
"""The synth alone takes about a minute on a busy 2-CPU machine; a run past this is stuck."""


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value), encoding="utf-8")
    partial.replace(path)  # a reader never sees half a file


def construct_facts(synthesis: Session) -> dict[str, dict[str, dict[str, Any]]]:
    """Blueprint -> stack construct ID -> what the stack construct says of itself (for the test that the manifest
    reader, `mlstack.assembly.read_stacks`, agrees with the constructs; the workers have no constructs)."""
    facts: dict[str, dict[str, dict[str, Any]]] = {}
    for name, bp in synthesis.blueprints.items():
        assert bp.built is not None
        facts[name] = {
            stack.node.id: {
                "stack_name": stack.stack_name,
                "artifact_id": stack.artifact_id,
                "termination_protection": stack.termination_protection,
                "depends_on": sorted(d.node.id for d in stack.dependencies),
            }
            for stack in bp.built.stacks
        }
    return facts


def combined(shipped: Session, others: Session | None) -> Session:
    """The shipped blueprints and the variants as one session: what the background checkers read."""
    if others is None:
        return shipped
    return Synthesis(
        outdir=shipped.outdir,
        blueprints={**shipped.blueprints, **others.blueprints},
        validation_report=shipped.validation_report,
        nag_failure=shipped.nag_failure,
    )


def _synthesize_variants(root: Path, modules: list[str]) -> tuple[Session | None, dict[str, Any]]:
    """The variants of `modules`, and what `ready.json` says of them (their files, nag result, or the error)."""
    if not modules:
        return None, {"files": [], "nag_failure": None, "error": None}
    try:
        files = variants.write(modules, root / "variants")
        synthesis = synthesize(root / "cdk.out-variants", files)
    except Exception:
        return None, {"files": [], "nag_failure": None, "error": traceback.format_exc()}
    return synthesis, {"files": [str(f) for f in files], "nag_failure": synthesis.nag_failure, "error": None}


def _started_runs() -> dict[str, list[gate_runs.Run | node_tools.Run]]:
    runs: dict[str, list[gate_runs.Run | node_tools.Run]] = {name: list(rs) for name, rs in gate_runs.RUNS.items()}
    runs.update({name: [run] for name, run in background.RUNS.items()})
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.session_synth")
    parser.add_argument("root", type=Path)
    parser.add_argument("--blueprints", required=True, help="comma-separated blueprint names")
    parser.add_argument("--checkers", default="", help=f"comma-separated, of {', '.join(READERS)}")
    parser.add_argument("--variants", default="", help="comma-separated test modules (tests/variants.py)")
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        files = [BLUEPRINTS_DIR / f"{name}.yaml" for name in args.blueprints.split(",") if name]
        synthesis = synthesize(root / "cdk.out", files)
        variant_synthesis, variant_facts = _synthesize_variants(root, [m for m in args.variants.split(",") if m])
        checked = combined(synthesis, variant_synthesis)
        selected = [prefix for name in args.checkers.split(",") if name for prefix in READERS[name]]
        gate_runs.start_if_selected(checked, selected)
        background.start_if_selected(checked, selected)
        runs = _started_runs()
        _write_json(
            root / "ready.json",
            {
                "nag_failure": synthesis.nag_failure,
                "constructs": construct_facts(synthesis),
                "variants": variant_facts,
                "runs": {
                    name: [{"name": r.name, "args": r.args, "out": str(r.out)} for r in rs] for name, rs in runs.items()
                },
            },
        )
    except BaseException:
        (root / "failed.txt").write_text(traceback.format_exc(), encoding="utf-8")
        raise
    started = {run.out: (run.process, run.started) for rs in runs.values() for run in rs if run.process is not None}
    run_files.wait_and_record(started, gate_runs.TIMEOUT_S)
    return 0


@dataclass
class SharedSynth:
    """A pytest process's handle on the run's shared synth under `root`."""

    root: Path
    blueprints: list[str]
    checkers: list[str]
    variant_modules: list[str] = field(default_factory=list)
    """The selected test modules whose variants are synthesized too (`tests/variants.py`)."""
    process: subprocess.Popen[bytes] | None = None
    """Set in the one process that started the synth."""

    def start(self) -> None:
        """Start the synth unless a process of this run already has (idempotent, across processes)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            request = self.root / "request.json"
            if request.exists():
                return
            args = [sys.executable, "-m", "tests.session_synth", str(self.root)]
            args += ["--blueprints", ",".join(self.blueprints), "--checkers", ",".join(self.checkers)]
            args += ["--variants", ",".join(self.variant_modules)]
            with (self.root / "synth.log").open("wb") as log:
                # Its own process group: the checkers it starts end with it (`finish`).
                self.process = subprocess.Popen(
                    args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
                )
            _write_json(request, {"pid": self.process.pid, "blueprints": self.blueprints, "checkers": self.checkers})

    def _wait_ready(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        ready, failed = self.root / "ready.json", self.root / "failed.txt"
        while not ready.exists():
            ended = self.process is not None and self.process.poll() is not None
            if failed.exists() or ended or time.monotonic() > deadline:
                log = (self.root / "synth.log").read_text(encoding="utf-8", errors="replace")
                where = self.root / "synth.log"
                raise RuntimeError(f"the session synth failed or hung; its output ({where}):\n{log[-6000:]}")
            time.sleep(run_files.POLL_S)
        value: dict[str, Any] = json.loads(ready.read_text(encoding="utf-8"))
        return value

    def load(self) -> tuple[Session, dict[str, dict[str, dict[str, Any]]]]:
        """The synthesized blueprints, read back once the synth is ready, and the stack constructs' facts. The
        checkers it started become this process's runs (`gate_runs.RUNS`, `background.RUNS`), ended by file."""
        self.start()
        ready = self._wait_ready()
        requested: list[str] = json.loads((self.root / "request.json").read_text(encoding="utf-8"))["blueprints"]
        configs = [load(BLUEPRINTS_DIR / f"{name}.yaml") for name in requested]
        synthesis = read_synthesis(self.root / "cdk.out", configs, nag_failure=ready["nag_failure"])
        for name, runs in ready["runs"].items():
            if name in gate_runs.READERS:
                gate_runs.RUNS[name] = [gate_runs.Run(r["name"], r["args"], Path(r["out"])) for r in runs]
            else:
                (run,) = runs
                background.RUNS[name] = node_tools.Run(run["name"], run["args"], Path(run["out"]))
        return synthesis, ready["constructs"]

    def load_variants(self) -> Session:
        """The variant blueprints, read back (an empty session where no selected module declares one); a failed
        variant synth fails here, with its traceback."""
        checked = self.checked_variants()
        if checked is None:
            raise RuntimeError(f"the variants' synth failed:\n{self._wait_ready()['variants']['error'][-6000:]}")
        return checked

    def checked_variants(self) -> Session | None:
        """The variants the background checkers read: None where their synth failed (the checkers read only the
        shipped templates then)."""
        self.start()
        facts = self._wait_ready()["variants"]
        if facts["error"]:
            return None
        configs = [load(Path(f)) for f in facts["files"]]
        return read_synthesis(self.root / "cdk.out-variants", configs, nag_failure=facts["nag_failure"])

    def finish(self, *, abandon: bool) -> None:
        """In the process that started it: wait for the synth's checkers (another worker may still be reading
        their reports), or end them all when the test run is stopping (`abandon`)."""
        if self.process is None or self.process.poll() is not None:
            return
        if not abandon:
            try:
                self.process.wait(timeout=TIMEOUT_S)
                return
            except subprocess.TimeoutExpired:
                pass
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


if __name__ == "__main__":
    exit_after_synth(main(sys.argv[1:]))
