"""AWS Guard rules: cfn-guard with the Guard rules `@cdklabs/cdk-validator-cfnguard` bundles (the Control Tower
proactive controls) over every template (`node_tools`). A finding is fixed, or skipped on its resource with a
reason (`Metadata.guard.skip`, written by `mlstack.constructs.scanners.skip_guard`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import BLUEPRINTS_DIR
from tests.synth import Session
from tests.template_checks import background, guard_groups, node_tools
from tests.template_checks.resolve import Stack

MIN_REASON = 20


KNOWN: dict[tuple[str, str, str], str] = {
    # (stack ID, logical ID prefix, control) -> why it cannot be skipped on the resource. Each must still be found
    # (the list only shrinks). Empty: every finding is fixed or skipped on its resource with a reason.
}


@pytest.fixture(scope="module")
def report(gated: Session) -> list[dict[str, Any]]:
    # Over the shipped blueprints' templates and the variants' (tests/variants.py).
    code, output = background.run(gated, "cfn-guard").wait()
    # cfn-guard exits 19 when a rule fails, 0 when none does; anything else is an error of the run itself.
    assert code in (0, 19), output[-2000:]
    parsed: list[dict[str, Any]] = json.loads(output)
    return parsed


def _skips(session: Session) -> dict[str, dict[str, str]]:
    return node_tools.guard_skips(session.blueprints)


def _known(finding: node_tools.GuardFinding) -> tuple[str, str, str] | None:
    _, stack_id, logical_id = finding.where.split("/")
    for key in KNOWN:
        if key[0] == stack_id and logical_id.startswith(key[1]) and key[2] == finding.control:
            return key
    return None


@pytest.fixture(scope="module")
def findings(gated: Session, report: list[dict[str, Any]]) -> list[node_tools.GuardFinding]:
    return node_tools.unskipped_guard_findings(report, gated.blueprints)


def test_guard_read_every_template(gated: Session, report: list[dict[str, Any]]) -> None:
    assert len(report) == sum(len(bp.templates) for bp in gated.blueprints.values())
    assert len(list(node_tools.GUARD_RULES.rglob("*.guard"))) > 200  # the Control Tower proactive controls


def test_only_the_rule_files_naming_a_template_s_types_run_on_it() -> None:
    rules = guard_groups.rule_types(node_tools.GUARD_RULES)
    (bucket_rules,) = [p for p in rules if p.name == "ct-s3-pr-1.guard"]
    chosen = guard_groups.applicable({"AWS::S3::Bucket", "AWS::IAM::Role"}, rules)
    assert bucket_rules in chosen
    assert all(rules[p] & {"AWS::S3::Bucket", "AWS::IAM::Role"} or not rules[p] for p in chosen)
    assert len(chosen) < len(rules) / 4
    assert all(rules.values())  # every file names a type (a file naming none would run on every template)


def test_every_guard_rule_applies_only_when_a_type_it_names_is_present() -> None:
    # guard_groups' premise, read from each rule file: a template without those types skips all its rules.
    ungated = {
        path.name: found
        for path in sorted(node_tools.GUARD_RULES.rglob("*.guard"))
        if (found := guard_groups.ungated_rules(path.read_text(encoding="utf-8")))
    }
    assert ungated == {}
    gated_rule = "let buckets = Resources.*[ Type == %T ]\nrule a when is_cfn_template(this) %buckets not empty {\n}\n"
    assert guard_groups.ungated_rules('let T = "AWS::S3::Bucket"\n' + gated_rule) == []
    everywhere = "let all = Resources.*\nrule b when %all not empty {\n}\nrule c {\n}\nrule d(x) {\n}\n"
    assert guard_groups.ungated_rules(everywhere) == ["rule b when %all not empty", "rule c"]


def test_the_rule_files_chosen_per_template_find_what_every_rule_finds(session: Session, tmp_path: Path) -> None:
    """The session's run uses the rule files that name a type of each template; the whole directory over the
    smallest templates (cfn-guard's time grows with template size) reports the same findings."""
    from tests.template_checks.resolve import session_stacks

    stacks = sorted(session_stacks(session.blueprints), key=lambda s: len(json.dumps(s[1].template)))[:10]
    run = node_tools.start_guard(tmp_path / "chosen", stacks)
    code, chosen = run.wait()
    assert code in (0, 19), chosen[-2000:]
    data = sorted((tmp_path / "chosen").glob("*.json"))
    args = guard_groups.validate_args(str(node_tools.guard_binary()), [node_tools.GUARD_RULES], data)
    every = subprocess.run(args, capture_output=True, text=True, check=False)
    assert every.returncode in (0, 19), every.stderr[-2000:]
    found = node_tools.guard_findings(json.loads(every.stdout))
    assert found, "the comparison needs templates with raw findings (skipped ones count)"
    assert node_tools.guard_findings(json.loads(chosen)) == found


def test_no_template_breaks_an_aws_guard_rule(findings: list[node_tools.GuardFinding]) -> None:
    new = [str(f) for f in findings if _known(f) is None]
    assert new == [], "\n".join(new)


def test_every_known_guard_finding_is_still_there(session: Session, findings: list[node_tools.GuardFinding]) -> None:
    stacks = {stack_id for bp in session.blueprints.values() for stack_id in bp.templates}
    found = {_known(f) for f in findings}
    gone = [f"{key}: {why}" for key, why in KNOWN.items() if key[0] in stacks and key not in found]
    # A selection (MLSTACK_TEST_BLUEPRINTS) may leave out the blueprint of an entry; the full session checks all.
    if sorted(session.blueprints) == sorted(p.stem for p in BLUEPRINTS_DIR.glob("*.yaml")):
        assert gone == [], "\n".join(gone)


def test_every_guard_skip_names_a_control_and_gives_a_reason(gated: Session) -> None:
    bad = [
        f"{where}: {control}"
        for where, skips in _skips(gated).items()
        for control, reason in skips.items()
        if not control.startswith("CT.") or len(reason) < MIN_REASON
    ]
    assert bad == []


def test_guard_sees_a_seeded_defect(tmp_path: Path) -> None:
    # A bucket without block-public-access settings (CT.S3.PR.1).
    template = {"Resources": {"Open": {"Type": "AWS::S3::Bucket", "Properties": {}}}}
    run = node_tools.start_guard(tmp_path / "guard", [("seed/Stack", Stack("seed", template, "us-east-1"))])
    code, output = run.wait()
    assert code == 19
    assert node_tools.GuardFinding("seed/Stack/Open", "CT.S3.PR.1") in node_tools.guard_findings(json.loads(output))
