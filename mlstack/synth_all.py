"""Synthesize every blueprint: one Stage per blueprint, in one App, or split over a few processes (one App each)
whose assemblies merge into one.

Used by `make synth`, `make bench` and the test session, so all three measure and check the same thing.
Templates are the same as `npx cdk synth -c blueprint=<name>` produces (logical IDs are stack-relative and
stack names are explicit); the assembly nests them as `cdk.out/assembly-<name>/`.

    python -m mlstack.synth_all [OUTDIR] [--jobs N]   # default ./cdk.out, one process per CPU (at most 4);
                                                    # exits 1 on a bad blueprint or a nag finding
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from mlstack import blueprint, resources
from mlstack.assembly import REPORT, StackInfo, default_jobs, merge_part, read_stacks
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig, load
from mlstack.console import print_problems
from mlstack.errors import MlstackError

WORKER_RESULT = "worker.json"
"""What a worker of `synthesize_all(jobs > 1)` leaves in its part folder: its cdk-nag failure, if any."""
WORKER_LOG = "worker.log"
"""A worker's stdout and stderr, in its part folder: shown when it fails."""


def cdk_json_context() -> dict[str, Any]:
    """The feature flags of `cdk.json` (a bare App() silently uses older defaults)."""
    context: dict[str, Any] = json.loads(resources.cdk_json().read_text(encoding="utf-8"))["context"]
    return context


@contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Build and synth with fewer passes of Python's cycle collector (restored after): a synth allocates millions of
    short-lived objects (jsii requests, references, generated structs) and with the default threshold (700) each
    young pass and every tenth older one also walks the modules and classes already loaded, about 15% of the
    Python side's CPU time. `gc.freeze()` keeps those out of every pass; a threshold of 20,000 makes passes rarer.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 20_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


@dataclass
class SynthesizedBlueprint:
    name: str
    config: BlueprintConfig
    stacks: dict[str, StackInfo]
    """Stack construct ID -> the stack as the assembly's manifest describes it."""
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Stack construct ID -> template JSON."""
    built: blueprint.BuiltBlueprint | None = None
    """The stack constructs, when this process synthesized the blueprint (`jobs=1` always does); None for a
    blueprint another process synthesized."""


@dataclass
class Synthesis:
    outdir: Path
    blueprints: dict[str, SynthesizedBlueprint]
    validation_report: dict[str, Any]
    nag_failure: str | None
    """None when cdk-nag passed; otherwise CDK's ValidationFailed message (details in `validation_report`)."""


def _weight(config: BlueprintConfig) -> int:
    """The rough share of a synth one blueprint takes (its stacks; a training cluster counts three)."""
    layers = (config.training, config.inference, config.inference_eks, config.mlops, config.ai_services)
    return 1 + 2 * (config.training is not None) + sum(layer is not None for layer in layers)


def _groups(configs: list[tuple[Path, BlueprintConfig]], jobs: int) -> list[list[Path]]:
    """`jobs` groups of about equal weight (heaviest first into the lightest group); the first stays in-process."""
    groups: list[list[Path]] = [[] for _ in range(max(1, min(jobs, len(configs))))]
    loads = [0] * len(groups)
    for path, config in sorted(configs, key=lambda pc: -_weight(pc[1])):
        i = loads.index(min(loads))
        groups[i].append(path)
        loads[i] += _weight(config)
    return groups


def _synth_here(
    outdir: Path, configs: list[BlueprintConfig], context: dict[str, Any], nag: bool
) -> tuple[dict[str, blueprint.BuiltBlueprint], str | None]:
    app = cdk.App(outdir=str(outdir), context=context)
    built: dict[str, blueprint.BuiltBlueprint] = {}
    nag_failure: str | None = None
    with fewer_gc_passes():
        for config in configs:
            built[config.name] = blueprint.build(cdk.Stage(app, config.name), config)
        if nag:
            cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        try:
            app.synth()
        except RuntimeError as err:  # ValidationFailed: unacknowledged findings, listed in the report
            nag_failure = str(err)
    return built, nag_failure


def _start_worker(part: Path, files: list[Path], context: dict[str, Any], nag: bool) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "mlstack.synth_all", "--worker", str(part), json.dumps(context)]
    args += ([] if nag else ["--no-nag"]) + [str(f) for f in files]
    part.mkdir(parents=True, exist_ok=True)
    # Its output goes to a file: a pipe nobody reads until this process's own synth ends would fill and stall it.
    with (part / WORKER_LOG).open("wb") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def synthesize_all(
    outdir: Path,
    blueprint_files: list[Path] | None = None,
    *,
    extra_context: dict[str, Any] | None = None,
    nag: bool = True,
    jobs: int = 1,
) -> Synthesis:
    """Synthesize `blueprint_files` (default: every shipped blueprint) into one cloud assembly under `outdir`.

    `jobs` > 1 splits the blueprints over that many processes (this one and `jobs - 1` children, each its own App
    and jsii kernel) and merges their assemblies: the templates are the same as with one process (each blueprint
    is its own Stage either way); only this process's blueprints have `built` stack constructs. Every blueprint
    is loaded and checked here first, so a bad one fails before any synth."""
    files = blueprint_files if blueprint_files is not None else sorted(BLUEPRINTS_DIR.glob("*.yaml"))
    configs = [(path, load(path)) for path in files]
    context = {**cdk_json_context(), **(extra_context or {})}
    groups = _groups(configs, jobs)
    outdir.mkdir(parents=True, exist_ok=True)
    parts = [outdir / f".part-{i}" for i in range(1, len(groups))]
    workers = [_start_worker(part, group, context, nag) for part, group in zip(parts, groups[1:], strict=True)]
    by_path = dict(configs)
    try:
        built, nag_failure = _synth_here(outdir, [by_path[p] for p in groups[0]], context, nag)
    finally:
        for worker in workers:
            worker.wait()
    for worker, part in zip(workers, parts, strict=True):
        if worker.returncode != 0:
            log = (part / WORKER_LOG).read_text(encoding="utf-8", errors="replace")[-4000:]
            raise RuntimeError(f"synth_all worker for {part.name} exited {worker.returncode}:\n{log}")
    order = [f"assembly-{config.name}" for _, config in configs]
    for part in parts:
        failure = json.loads((part / WORKER_RESULT).read_text(encoding="utf-8"))["nag_failure"]
        nag_failure = "\n".join(f for f in (nag_failure, failure) if f) or None
        merge_part(outdir, part, order)
    report_path = outdir / REPORT
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    result: dict[str, SynthesizedBlueprint] = {}
    for _, config in configs:
        name = config.name
        stacks = read_stacks(outdir / f"assembly-{name}")
        synthesized = SynthesizedBlueprint(name=name, config=config, stacks=stacks, built=built.get(name))
        for stack in stacks.values():
            if stack.template_file.exists():
                synthesized.templates[stack.construct_id] = json.loads(stack.template_file.read_text())
        result[name] = synthesized
    return Synthesis(outdir=outdir, blueprints=result, validation_report=report, nag_failure=nag_failure)


def _worker(argv: list[str]) -> int:
    """`--worker PART CONTEXT_JSON [--no-nag] FILE...`: one group of `synthesize_all(jobs > 1)`."""
    part, context, rest = Path(argv[0]), json.loads(argv[1]), argv[2:]
    nag = "--no-nag" not in rest
    configs = [load(Path(f)) for f in rest if f != "--no-nag"]
    _, nag_failure = _synth_here(part, configs, context, nag)
    (part / WORKER_RESULT).write_text(json.dumps({"nag_failure": nag_failure}), encoding="utf-8")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return _worker(argv[1:])
    jobs = default_jobs()
    if "--jobs" in argv:
        at = argv.index("--jobs")
        jobs, argv = int(argv[at + 1]), argv[:at] + argv[at + 2 :]
    outdir = Path(argv[0] if argv else "cdk.out")
    try:
        synthesis = synthesize_all(outdir, jobs=jobs)
    except MlstackError as err:
        print_problems(err)
        return 1
    if synthesis.nag_failure:
        print(f"error: cdk-nag: {synthesis.nag_failure}", file=sys.stderr)
        return 1
    for name, item in synthesis.blueprints.items():
        print(f"{name}: {', '.join(item.templates)} -> {outdir}/assembly-{name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
