"""Variant blueprints: a shipped blueprint with a setting changed, that a test module asserts on (a budget that
scales Karpenter pools to zero, a node group on a Capacity Block, serving without Karpenter, ...).

The run's one synth process (`tests/session_synth.py`) synthesizes them after the shipped blueprints, with the
same test context and cdk-nag, into an App and assembly of their own (`<root>/cdk.out-variants`), and the
background checkers (cfn-lint, checkov, cfn-guard, asl-validator) read their templates in the same runs as the
shipped ones: one start of each checker per test run instead of one per module (checkov alone takes 7 s of CPU to
start). A module in `MODULES` declares its variants in `SESSION_VARIANTS` (name -> builder); they are synthesized
when one of its tests is selected, and its tests read them from the `variants_session` fixture. A variant's name
is its own: no shipped blueprint and no other variant has it (the checkers' reports are read by name).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig, load
from mlstack.synth_all import Synthesis
from tests import readers

MODULES = readers.VARIANT_MODULES
"""The test modules that declare `SESSION_VARIANTS`."""
GATE_TEST = readers.GATE_TEST
GATE_READERS = readers.GATE_READERS

Builder = Callable[[], BlueprintConfig]


def selected_modules(nodeids: Iterable[str]) -> list[str]:
    """The modules of `MODULES` that have a selected test."""
    modules = {nodeid.split("::", 1)[0] for nodeid in nodeids}
    return [module for module in MODULES if module in modules]


def builders(modules: Iterable[str]) -> dict[str, Builder]:
    """Variant name -> its builder, from each module's `SESSION_VARIANTS`."""
    shipped = {load(path).name for path in BLUEPRINTS_DIR.glob("*.yaml")}
    found: dict[str, Builder] = {}
    for module in modules:
        declared: dict[str, Builder] = importlib.import_module(module[: -len(".py")].replace("/", ".")).SESSION_VARIANTS
        for name, build in declared.items():
            assert name not in found and name not in shipped, f"{module}: the variant name {name} is taken"
            found[name] = build
    return found


def write(modules: Iterable[str], folder: Path) -> list[Path]:
    """Each variant of `modules` as a blueprint file in `folder` (named like the variant)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, build in builders(modules).items():
        config = build()
        assert config.name == name, f"the variant {name} builds a blueprint named {config.name}"
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_unset=True)), encoding="utf-8")
        files.append(path)
    return files


def only(variants: Synthesis, names: Iterable[str]) -> Synthesis:
    """The variants named `names` of the run's variants session (a module reads its own)."""
    wanted = set(names)
    missing = wanted - set(variants.blueprints)
    assert not missing, f"not synthesized: {sorted(missing)} (is the module in tests/readers.py VARIANT_MODULES?)"
    return Synthesis(
        outdir=variants.outdir,
        blueprints={name: bp for name, bp in variants.blueprints.items() if name in wanted},
        validation_report=variants.validation_report,
        nag_failure=variants.nag_failure,
    )


def gate_problems(gated: Synthesis, own: Synthesis) -> list[str]:
    """What the gates find on the variants of `own`: cdk-nag's and CDK's template validation's violations on their
    constructs, then cfn-lint's, checkov's and cfn-guard's findings (skips honoured) on their templates, from the
    run's background checkers (which read `gated`: the shipped blueprints and every variant)."""
    from tests.blueprints import gate_runs
    from tests.synth import validation_violations
    from tests.template_checks import background, node_tools

    names = set(own.blueprints)
    problems = validation_violations(own.validation_report, stages=names)
    problems += [p for p in gate_runs.cfn_lint_problems(gated) if p.split("/", 1)[0] in names]
    problems += [p for p in gate_runs.checkov_failures(gated) if p.split("/", 1)[0] in names]
    code, output = background.run(gated, "cfn-guard").wait()
    assert code in (0, 19), output[-2000:]
    findings = node_tools.unskipped_guard_findings(json.loads(output), gated.blueprints)
    problems += [f"cfn-guard {f}" for f in findings if f.where.split("/", 1)[0] in names]
    return problems
