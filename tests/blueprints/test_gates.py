"""Quality gates over every shipped blueprint: cdk-nag, CDK template validation, cfn-lint, snapshots."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from tests.blueprints import gate_runs
from tests.conftest import selected_blueprints
from tests.synth import Session, nag_findings, validation_violations

_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def _stack_ids(session: Session) -> list[tuple[str, str]]:
    return [(name, stack_id) for name, bp in session.blueprints.items() for stack_id in bp.templates]


def test_every_blueprint_file_was_synthesized(session: Session) -> None:
    assert sorted(session.blueprints) == selected_blueprints()


def test_cdk_nag_aws_solutions_has_no_unacknowledged_findings(session: Session) -> None:
    findings = nag_findings(session.validation_report)
    assert session.nag_failure is None and not findings, "\n".join(findings) or session.nag_failure


def test_nag_findings_reads_the_report_cdk_writes(tmp_path: Path) -> None:
    # A bucket without access logs (AwsSolutions-S1): the finding names the construct (the old reader raised
    # KeyError on the report's real shape, hiding every finding behind it).
    app = cdk.App(outdir=str(tmp_path))
    s3.Bucket(cdk.Stack(app, "Seed"), "Open")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert any(f.startswith("AwsSolutions-S1: Seed/Open/Resource") for f in nag_findings(report))


def test_validation_violations_keep_the_given_stages_and_those_naming_no_construct() -> None:
    def violation(rule: str, *paths: str, severity: str = "warning") -> dict[str, Any]:
        return {"ruleName": rule, "severity": severity, "violatingConstructs": [{"constructPath": p} for p in paths]}

    report = {
        "pluginReports": [
            {"pluginName": "AwsSolutions", "violations": [violation("S1", "a/B", severity="error"), violation("W")]},
            {"pluginName": "CloudFormation-Validate", "violations": [violation("E1", "a/X", "b/Y"), violation("E2")]},
        ]
    }
    found = validation_violations(report, stages={"a"})
    assert found == [
        "AwsSolutions S1: a/B ()",
        "CloudFormation-Validate E1: a/X ()",
        "CloudFormation-Validate E2: ? ()",
    ]
    assert len(validation_violations(report)) == 4


def test_cdk_builtin_template_validation_is_on_and_clean(session: Session) -> None:
    # CDK validates templates against the CloudFormation schemas at synth and reports violations as warnings;
    # we hold them to zero. (CDK_VALIDATION=false would skip the plugin: the tests never set it.)
    violations = [
        f"{report['pluginName']}: {violation['ruleName']} {violation.get('description', '')}"
        for report in session.validation_report.get("pluginReports", [])
        if report["pluginName"] != "AwsSolutions"
        for violation in report["violations"]
    ]
    assert violations == []


def test_cfn_lint_finds_no_errors_or_warnings(gated: Session) -> None:
    # cfn-lint's CLI per region over the shipped blueprints and the variants (tests/variants.py), in the background
    # since the session synthesized (gate_runs; ignores: .cfnlintrc.yaml)
    assert gate_runs.cfn_lint_problems(gated) == []


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return _ASSET_HASH.sub("<asset-hash>", value)
    return value


@pytest.fixture
def json_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


def test_templates_match_snapshots(session: Session, json_snapshot: SnapshotAssertion) -> None:
    # One scrubbed snapshot per stack; asset hashes change with code and CDK versions, not with intent.
    # Update intentionally with `make snapshot-update` and review the diff.
    for name, stack_id in _stack_ids(session):
        template = session.blueprints[name].templates[stack_id]
        assert _scrub(template) == json_snapshot(name=f"{name}.{stack_id}")


def _read_by_notifying_composite(resources: dict[str, Any]) -> set[str]:
    """Alarms an AWS::CloudWatch::CompositeAlarm with an alarm action reads (its AlarmRule's Fn::GetAtt Arn)."""
    read: set[str] = set()
    for resource in resources.values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::CompositeAlarm" and props.get("AlarmActions"):
            rule = props["AlarmRule"]
            parts = rule["Fn::Join"][1] if isinstance(rule, dict) else []
            read |= {p["Fn::GetAtt"][0] for p in parts if isinstance(p, dict) and "Fn::GetAtt" in p}
    return read


def test_every_alarm_notifies_someone(session: Session) -> None:
    # An alarm without an action changes colour on a console nobody watches: each one notifies a topic, or is read
    # by a composite alarm that does.
    silent = [
        f"{name}/{stack_id}: {logical_id}"
        for name, bp in session.blueprints.items()
        for stack_id, template in bp.templates.items()
        for logical_id, resource in template.get("Resources", {}).items()
        if resource["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        and not resource["Properties"].get("AlarmActions")
        and logical_id not in _read_by_notifying_composite(template.get("Resources", {}))
    ]
    assert silent == []
