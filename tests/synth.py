"""The test session's view of `mlstack.synth_all`: every blueprint synthesized once, with test context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from mlstack.synth_all import Synthesis, synthesize_all

__all__ = ["ROOT", "TEST_CONTEXT", "Session", "nag_findings", "synthesize", "template", "validation_violations"]

Session = Synthesis

ROOT = Path(__file__).resolve().parents[1]
"""The repository checkout the tests run in."""

TEST_CONTEXT: dict[str, Any] = {
    # Unit tests assert on templates, not on bundled code; and no CDK-version metadata in snapshots.
    "aws:cdk:bundling-stacks": [],
    "aws:cdk:version-reporting": False,
}


def synthesize(outdir: Path, files: list[Path] | None = None) -> Session:
    return synthesize_all(outdir, files, extra_context=TEST_CONTEXT)


def template(session: Session, blueprint: str, stack_id: str) -> Template:
    return Template.from_json(session.blueprints[blueprint].templates[stack_id])


def nag_findings(validation_report: dict[str, Any]) -> list[str]:
    """cdk-nag's errors in CDK's validation-report.json: each violation names its `violatingConstructs` (the
    report's key; a plugin hands CDK `violatingResources`, which the report does not keep)."""
    return [
        f"{violation['ruleName']}: {construct.get('constructPath')} ({violation.get('description', '')[:80]})"
        for report in validation_report.get("pluginReports", [])
        if report["pluginName"] == "AwsSolutions"
        for violation in report["violations"]
        for construct in violation["violatingConstructs"]
        if violation.get("severity") in ("error", "fatal")
    ]


def validation_violations(validation_report: dict[str, Any], stages: set[str] | None = None) -> list[str]:
    """`<plugin> <rule>: <construct path> (<description>)` for cdk-nag's errors and every violation of the other
    plugins (CDK's CloudFormation validation and the construct annotations report warnings), one per violating
    construct (`?` where a violation names none), limited to constructs under `stages` (a blueprint's Stage is
    named like it) where given; a violation that names no construct is always kept."""
    return [
        f"{report['pluginName']} {violation['ruleName']}: {path} ({violation.get('description', '')[:80]})"
        for report in validation_report.get("pluginReports", [])
        for violation in report["violations"]
        if report["pluginName"] != "AwsSolutions" or violation.get("severity") in ("error", "fatal")
        for construct in violation.get("violatingConstructs") or [{}]
        if (path := str(construct.get("constructPath", "?"))) == "?"
        or stages is None
        or path.split("/", 1)[0] in stages
    ]
