"""cfn-lint and checkov over every template of the session, each in its own process, started in the background as
soon as the session has synthesized (like cfn-guard and asl-validator, `tests/template_checks/background.py`), by
the process that synthesized (`tests/session_synth.py`), once per test run.

They are the slowest gates (cfn-lint about 35 s, checkov about 12 s on a quiet machine) and need nothing but the
template files, so they run beside the tests; `tests/conftest.py` runs the tests that read their reports last,
when the runs are done. A reader in another process waits for the run's end file (`tests/run_files.py`). cfn-lint
runs as its CLI, once per region (the blueprints' regions), with the ignored checks of `.cfnlintrc.yaml`; checkov
from its own venv, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests import readers, run_files
from tests.synth import ROOT, Session

CFN_LINT = Path(os.environ.get("MLSTACK_CFN_LINT", ROOT / ".venv" / "bin" / "cfn-lint"))
CHECKOV = Path(os.environ.get("MLSTACK_CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))

GC_TUNED = ROOT / "tests" / "gc_tuned.py"


def tuned(script: Path) -> list[str]:
    """The command that runs the console script `script` with fewer cycle-collector passes (`tests/gc_tuned.py`),
    under the interpreter its `#!` line names; the script alone where that is not a Python that exists (a shell
    wrapper, a binary, a `#!` with flags or through env, which tuning could change)."""
    try:
        with script.open("rb") as file:
            first = file.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return [str(script)]
    python = Path(first.removeprefix("#!")) if first.startswith("#!/") else None
    if python is None or not python.name.startswith("python") or not python.is_file():  # with flags: no such file
        return [str(script)]
    return [str(python), str(GC_TUNED), str(script)]


READERS = readers.GATE_RUN_READERS
"""The tests (node ID prefixes) that read each run: a run starts only when one of them is selected."""

TIMEOUT_S = 600


@dataclass
class Run:
    """One background run: its process, and its stdout (the report) and stderr in files of their own."""

    name: str
    args: list[str]
    out: Path
    started: float = field(default_factory=time.monotonic)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Run:
        with self.out.open("wb") as out, self.out.with_suffix(".stderr").open("wb") as err:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=err, cwd=ROOT)
        return self

    def wait(self) -> tuple[int, str, str]:
        """(exit status, stdout, stderr), once the run has ended: this process's own run, or one the session synth
        started (no `process` here: its end is a file, `tests/run_files.py`)."""
        if self.process is None:
            code, seconds = run_files.wait_for_end(self.out, TIMEOUT_S)
            print(f"\n{self.name}: {seconds:.1f} s", file=sys.stderr)
        else:
            waited = self.process.returncode is None
            code = self.process.wait(timeout=TIMEOUT_S)
            if waited:
                print(f"\n{self.name}: {time.monotonic() - self.started:.1f} s", file=sys.stderr)
        read = {"encoding": "utf-8", "errors": "replace"}
        return code, self.out.read_text(**read), self.out.with_suffix(".stderr").read_text(**read)


RUNS: dict[str, list[Run]] = {}


def template_files(session: Session) -> dict[Path, tuple[str, str, str]]:
    """Each template file of the session -> (blueprint, stack construct ID, region)."""
    return {
        stack.template_file: (name, stack.construct_id, stack.region)
        for name, bp in session.blueprints.items()
        for stack in bp.stacks.values()
        if stack.construct_id in bp.templates
    }


def cfn_lint_ignores() -> list[str]:
    config = yaml.safe_load((ROOT / ".cfnlintrc.yaml").read_text())
    return list(config.get("ignore_checks", []))


def _start_cfn_lint(session: Session, workdir: Path) -> list[Run]:
    by_region: dict[str, list[Path]] = defaultdict(list)
    for path, (_, _, region) in sorted(template_files(session).items()):
        by_region[region].append(path)
    runs = []
    for region, paths in sorted(by_region.items()):
        args = [*tuned(CFN_LINT), "--format", "json", "--regions", region]
        args += ["--ignore-checks", *cfn_lint_ignores(), "--", *map(str, paths)]
        runs.append(Run(f"cfn-lint {region}", args, workdir / f"cfn-lint-{region}.json").start())
    return runs


def _checkov_copy(workdir: Path, blueprint: str, stack_id: str) -> Path:
    """Where checkov reads a template: a copy named `<blueprint>--<stack ID>.template.json`. checkov's parser keeps
    the file's path beside each resource's properties, and its secret checks (CKV_AWS_45 on a function's
    environment, CKV_AWS_46 on user data) read it: in the assembly's own path, a blueprint name's last word, a
    slash and the stack's artifact ID can make 40 key-like characters ("fixed/servingfixedInferenceStack48665F31"),
    which it reports as an AWS secret access key. The copy's name has none."""
    return workdir / "checkov" / f"{blueprint}--{stack_id}.template.json"


def _start_checkov(session: Session, workdir: Path) -> list[Run]:
    args = [*tuned(CHECKOV), "--framework", "cloudformation", "--skip-download", "--quiet", "--compact", "-o", "json"]
    (workdir / "checkov").mkdir(parents=True, exist_ok=True)
    for path, (blueprint, stack_id, _) in sorted(template_files(session).items()):
        copy = _checkov_copy(workdir, blueprint, stack_id)
        shutil.copyfile(path, copy)
        args += ["-f", str(copy)]
    return [Run("checkov", args, workdir / "checkov.json").start()]


def start_if_selected(session: Session, selected: Sequence[str]) -> None:
    wanted = {name for name, prefixes in READERS.items() if any(nodeid.startswith(prefixes) for nodeid in selected)}
    workdir = session.outdir / "gates"
    workdir.mkdir(parents=True, exist_ok=True)
    if "cfn-lint" in wanted and CFN_LINT.exists():
        RUNS["cfn-lint"] = _start_cfn_lint(session, workdir)
    if "checkov" in wanted and CHECKOV.exists():
        RUNS["checkov"] = _start_checkov(session, workdir)


def _runs(session: Session, name: str, tool: Path) -> list[Run]:
    assert tool.exists(), f"{tool} is missing: run `make install`"
    # The session synth starts a run for every reader the test run selected (tests/session_synth.py).
    assert name in RUNS, f"{name} was not started: the session synth starts the runs whose READERS are selected"
    return RUNS[name]


def cfn_lint_problems(session: Session) -> list[str]:
    """Every cfn-lint match as `<blueprint>/<stack>: <rule> <message> @ <path>` (empty: clean)."""
    files = {path.resolve(): labels for path, labels in template_files(session).items()}
    problems = []
    for run in _runs(session, "cfn-lint", CFN_LINT):
        code, output, errors = run.wait()
        # Exit status: a bit per level found (2 error, 4 warning, 8 informational); bit 1 is a failed run.
        assert code & 1 == 0, (output + errors)[-2000:]
        for match in json.loads(output):
            name, stack_id, _ = files[Path(match["Filename"]).resolve()]
            path = "/".join(map(str, match["Location"]["Path"] or []))
            problems.append(f"{name}/{stack_id}: {match['Rule']['Id']} {match['Message']} @ {path}")
    return problems


def checkov_report(session: Session) -> list[dict[str, Any]]:
    """checkov's JSON report (one entry per framework) over every template."""
    (run,) = _runs(session, "checkov", CHECKOV)
    code, output, errors = run.wait()
    assert code in (0, 1), (output + errors)[-2000:]
    report = json.loads(output) if output.strip() else []
    return report if isinstance(report, list) else [report]


def checkov_failures(session: Session) -> list[str]:
    """Every failed checkov check as `<blueprint>/<stack>: <check> <resource>: <name>` (empty: clean)."""
    failed = []
    for report in checkov_report(session):
        for check in report.get("results", {}).get("failed_checks", []):
            blueprint, stack_id = Path(check["file_path"]).name.removesuffix(".template.json").split("--", 1)
            failed.append(f"{blueprint}/{stack_id}: {check['check_id']} {check['resource']}: {check['check_name']}")
    return failed
