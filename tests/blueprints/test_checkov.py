"""checkov, the second policy scanner, over every synthesized template (next to cdk-nag in test_gates.py).

checkov runs from its own venv (`make install` creates .venv-checkov; its pins clash with boto3/moto), offline
(`--skip-download`). A finding is fixed, or skipped on its resource with a reason (`Metadata.checkov.skip`, written
by `mlstack.constructs.scanners.skip_checkov`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.blueprints import gate_runs
from tests.synth import Session

MIN_REASON = 20
"""A skip's comment must say why (a few words at least), not just 'n/a'."""


@pytest.fixture(scope="module")
def checkov_report(gated: Session) -> list[dict[str, Any]]:
    # One checkov run over every template (the shipped blueprints' and the variants', tests/variants.py), in the
    # background since the session synthesized (gate_runs).
    return gate_runs.checkov_report(gated)


def test_checkov_scanned_every_template(gated: Session, checkov_report: list[dict[str, Any]]) -> None:
    summary = [r["summary"] for r in checkov_report if r.get("check_type") == "cloudformation"]
    assert summary and summary[0]["parsing_errors"] == 0
    assert (
        summary[0]["resource_count"]
        >= sum(len(t["Resources"]) for bp in gated.blueprints.values() for t in bp.templates.values()) // 2
    )  # checkov counts the resources it has checks for; a dropped template would halve this


def test_checkov_has_no_failed_checks(checkov_report: list[dict[str, Any]]) -> None:
    failed = [
        f"{check['check_id']} {check['resource']} ({Path(check['file_path']).name}): {check['check_name']}"
        for report in checkov_report
        for check in report.get("results", {}).get("failed_checks", [])
    ]
    assert failed == [], "\n".join(failed)


def test_every_checkov_skip_names_a_check_and_gives_a_reason(gated: Session) -> None:
    bad = []
    for name, bp in gated.blueprints.items():
        for stack_id, template in bp.templates.items():
            for logical_id, resource in template["Resources"].items():
                for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
                    if not str(skip.get("id", "")).startswith("CKV") or len(skip.get("comment", "")) < MIN_REASON:
                        bad.append(f"{name}/{stack_id}/{logical_id}: {skip}")
    assert bad == []
