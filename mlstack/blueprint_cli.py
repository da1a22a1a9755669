"""`mlstack list | validate | schema | plan`: the blueprint side of the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mlstack import config as blueprint_config
from mlstack.config import BlueprintConfig
from mlstack.console import render_table
from mlstack.errors import BlueprintError


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="shipped blueprints with one-line descriptions")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser("validate", help="check a blueprint file: one line per problem, exit 2 if any")
    p.add_argument("file", help="path to a blueprint YAML file, or a shipped blueprint name")
    p.add_argument("--json", action="store_true", help="print the validated blueprint with defaults filled in")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("schema", help="JSON Schema of a blueprint file (for editor completion)")
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("plan", help="what a blueprint creates, costs and needs in quotas (offline)")
    p.add_argument("blueprint", nargs="?", default=blueprint_config.DEFAULT_BLUEPRINT, help="name or path")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--access", action="store_true", help="also synthesize and check run-time access (mlstack access)")
    p.add_argument(
        "--serve-check",
        action="append",
        default=[],
        metavar="[ENDPOINT[/VARIANT]=]FILE",
        help="a `mlstack serve-check` report of one instance: its measured tokens/s replace the estimate",
    )
    p.set_defaults(handler=cmd_plan)


def _load_all() -> list[tuple[Path, BlueprintConfig | BlueprintError]]:
    result: list[tuple[Path, BlueprintConfig | BlueprintError]] = []
    for path in sorted(blueprint_config.BLUEPRINTS_DIR.glob("*.yaml"), key=lambda p: p.stem):
        try:
            result.append((path, blueprint_config.load(path)))
        except BlueprintError as err:
            result.append((path, err))
    return result


def cmd_list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for path, loaded in _load_all():
        if isinstance(loaded, BlueprintError):
            rows.append({"name": path.stem, "description": f"INVALID: {loaded.problems[0]}", "stacks": []})
        else:
            rows.append({"name": loaded.name, "description": loaded.description, "stacks": loaded.stack_ids})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if rows:
        default = {blueprint_config.DEFAULT_BLUEPRINT: " (default)"}
        print(render_table(None, [[r["name"], r["description"] + default.get(r["name"], "")] for r in rows]))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    loaded = blueprint_config.load(args.file)
    if args.json:
        print(json.dumps(loaded.model_dump(mode="json"), indent=2))
    else:
        print(f"ok: {args.file}: blueprint {loaded.name!r} -> {', '.join(loaded.stack_ids)}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(blueprint_config.json_schema(), indent=2))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from mlstack.plan import build_plan, render
    from mlstack.plan.serving import parse_serve_checks, serving_targets

    config = blueprint_config.load(args.blueprint)
    plan = build_plan(config, serve_checks=parse_serve_checks(args.serve_check, serving_targets(config)))
    data, text = plan.to_json(), render(plan)
    if args.access:  # synthesizes the blueprint: only on request, so a plain `mlstack plan` never starts the CDK
        from mlstack.access import cli as access_cli
        from mlstack.access.render import summary

        report = access_cli.check(args.blueprint)
        data["access"] = {
            "principals": len(report.principals),
            "calls": len(report.calls),
            "denied": len(report.denied),
        }
        text += "\n\n" + summary(report)
    else:
        text += f"\n\nRun-time access: not checked here (needs a synth): --access, or mlstack access {plan.blueprint}"
    print(json.dumps(data, indent=2) if args.json else text)
    return 0
