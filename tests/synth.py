"""The test session's view of `mlstack.synth_all`: every blueprint synthesized once, with test context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from mlstack.synth_all import Synthesis, synthesize_all

__all__ = ["ROOT", "TEST_CONTEXT", "Session", "synthesize", "template"]

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
