"""Synthesize every blueprint in one process: one App, one Stage per blueprint, one synth.

Used by `make synth`, `make bench` and the test session, so all three measure and check the same thing.
Templates are the same as `npx cdk synth -c blueprint=<name>` produces (logical IDs are stack-relative and
stack names are explicit); the assembly nests them as `cdk.out/assembly-<name>/`.

    python -m mlstack.synth_all [OUTDIR]      # default ./cdk.out; exits 1 on a bad blueprint or a nag finding
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from mlstack import blueprint, resources
from mlstack.assembly import StackInfo, read_stacks
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig, load
from mlstack.console import print_problems
from mlstack.errors import MlstackError
from mlstack.validation import add_template_validation, start_template_validation


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
    # A caller that froze first (a test process freezes what collecting the tests imported) keeps its freeze, and
    # nothing more is frozen: gc.unfreeze() thaws everything, not just what this froze, and what a second freeze
    # took (garbage cycles not yet collected among it) would never be collected.
    owns_freeze = gc.get_freeze_count() == 0
    if owns_freeze:
        gc.freeze()
    gc.set_threshold(max(threshold[0], 20_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if owns_freeze:
            gc.unfreeze()


def exit_after_synth(code: int) -> NoReturn:
    """Exit an entry point's process after its synth, with `code`, freezing first: the interpreter's teardown makes
    full passes of the cycle collector over everything the synth left (aws_cdk's generated classes, every jsii
    proxy: about a million objects), only to free memory the operating system takes back anyway. Frozen objects
    are left out of those passes; the teardown still runs the atexit handlers (the jsii kernel's, the validation
    worker's), flushes and closes files. An all-blueprint synth, 3 interleaved runs, process time after the synth
    returned (start included): 1.50-1.86 s, 1.01-1.05 s with the freeze, the same as leaving with os._exit."""
    gc.freeze()
    sys.exit(code)


@dataclass
class SynthesizedBlueprint:
    name: str
    config: BlueprintConfig
    built: blueprint.BuiltBlueprint | None
    """The stack constructs; None for an assembly read back from disk (`read_synthesis`)."""
    stacks: dict[str, StackInfo]
    """Stack construct ID -> the stack as the assembly's manifest describes it (what the CDK CLI deploys)."""
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Stack construct ID -> template JSON."""


@dataclass
class Synthesis:
    outdir: Path
    blueprints: dict[str, SynthesizedBlueprint]
    validation_report: dict[str, Any]
    nag_failure: str | None
    """None when cdk-nag passed; otherwise CDK's ValidationFailed message (details in `validation_report`)."""


def synthesize_all(
    outdir: Path,
    blueprint_files: list[Path] | None = None,
    *,
    extra_context: dict[str, Any] | None = None,
    nag: bool = True,
) -> Synthesis:
    """Synthesize `blueprint_files` (default: every shipped blueprint) into one cloud assembly under `outdir`, each
    blueprint its own Stage of one App. Every blueprint is loaded and checked first, so a bad one fails before any
    synth.

    One process on purpose: splitting the blueprints over two processes (each its own App and jsii kernel, the
    assemblies merged) was measured slower on a 2-CPU machine, 16.0 s against 14.4 s wall and 26.6 s against
    17.3 s CPU (3 interleaved runs): one synth already keeps more than one CPU busy (V8's helper threads), and each
    process pays its own kernel start."""
    files = blueprint_files if blueprint_files is not None else sorted(BLUEPRINTS_DIR.glob("*.yaml"))
    configs = [load(path) for path in files]
    # The validation worker gets ready while the blueprints are built (mlstack/validation.py); none for nothing.
    validation = start_template_validation() if configs else None
    app = cdk.App(
        outdir=str(outdir),
        context={**cdk_json_context(), **(extra_context or {})},
        builtin_cloud_formation_validation=False,
    )
    built: dict[str, blueprint.BuiltBlueprint] = {}
    nag_failure: str | None = None
    with fewer_gc_passes():
        for config in configs:
            built[config.name] = blueprint.build(cdk.Stage(app, config.name), config)
        if nag:
            cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        add_template_validation(app, worker=validation, stacks=[s for b in built.values() for s in b.stacks])
        try:
            app.synth()
        except RuntimeError as err:  # ValidationFailed: unacknowledged findings, listed in the report
            nag_failure = str(err)
        finally:
            if validation is not None:
                # A synth that failed before CDK asked for the validation leaves the worker looking for templates
                # that will not come (a test session's process goes on synthesizing): it stops.
                validation.expect([])
    return read_synthesis(outdir, configs, built=built, nag_failure=nag_failure)


def read_synthesis(
    outdir: Path,
    configs: list[BlueprintConfig],
    *,
    built: dict[str, blueprint.BuiltBlueprint] | None = None,
    nag_failure: str | None = None,
) -> Synthesis:
    """The `Synthesis` of the cloud assembly under `outdir` that `synthesize_all` wrote for `configs`: each
    blueprint's stacks from its nested manifest, their templates and CDK's validation report. Without `built` (an
    assembly another process synthesized), `SynthesizedBlueprint.built` is None."""
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    result: dict[str, SynthesizedBlueprint] = {}
    for config in configs:
        name = config.name
        stacks = read_stacks(outdir / f"assembly-{name}")
        constructs = built[name] if built is not None else None
        synthesized = SynthesizedBlueprint(name=name, config=config, built=constructs, stacks=stacks)
        for stack in stacks.values():
            if stack.template_file.exists():
                synthesized.templates[stack.construct_id] = json.loads(stack.template_file.read_text())
        result[name] = synthesized
    return Synthesis(outdir=outdir, blueprints=result, validation_report=report, nag_failure=nag_failure)


def main(argv: list[str]) -> int:
    outdir = Path(argv[0] if argv else "cdk.out")
    try:
        synthesis = synthesize_all(outdir)
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
    exit_after_synth(main(sys.argv[1:]))
