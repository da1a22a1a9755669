"""`mlstack access <blueprint>`: synthesize one blueprint (offline) and check every run-time call."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from mlstack import config as blueprint_config
from mlstack.access.evaluate import Report, evaluate
from mlstack.access.resolve import Stacks


def register(sub: Any) -> None:
    p = sub.add_parser(
        "access",
        help="prove offline that every call the blueprint's run-time principals make is allowed (exit 1 if not)",
    )
    p.add_argument("blueprint", nargs="?", default=blueprint_config.DEFAULT_BLUEPRINT, help="name or path")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_access)


def stacks_of(synthesized: Any) -> Stacks:
    """The `Stacks` of one `mlstack.synth_all.SynthesizedBlueprint` (templates by CloudFormation stack name)."""
    templates = {synthesized.stacks[sid].stack_name: t for sid, t in synthesized.templates.items()}
    return Stacks(templates, synthesized.config.env.region)


def check(path: str) -> Report:
    from mlstack.synth_all import synthesize_all

    file = blueprint_config.loader.resolve(path)
    config = blueprint_config.load(file)
    with tempfile.TemporaryDirectory(prefix="mlstack-access-") as outdir:
        synthesis = synthesize_all(Path(outdir), [file], nag=False)
    return evaluate(config.name, stacks_of(synthesis.blueprints[config.name]))


def cmd_access(args: argparse.Namespace) -> int:
    from mlstack.access.render import render, to_json

    report = check(args.blueprint)
    print(json.dumps(to_json(report), indent=2) if args.json else render(report))
    return 1 if report.denied else 0
