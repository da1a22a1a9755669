"""Acknowledging a cdk-nag finding, or skipping a checkov check, on one resource with a reason a reviewer can check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Acknowledgment, CfnResource, Stack, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """cdk-nag rule ID (optionally granular: `AwsSolutions-IAM5[Resource::...]`) -> reason, on `scope`."""
    for rule_id, reason in reasons.items():
        Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def nag_id(stack: Stack, value: str) -> str:
    """How cdk-nag writes a resource in a granular finding id (`<Logical.Arn>/x/*`, `arn:<AWS::Partition>:...`)."""
    return _render(stack.resolve(value))


def checkov_skip(resource: CfnResource, reasons: Mapping[str, str]) -> None:
    """checkov check ID -> reason, as the resource's `Metadata.checkov.skip` (checkov's CloudFormation runner)."""
    skips = [{"id": check, "comment": reason} for check, reason in sorted(reasons.items())]
    existing = resource.get_metadata("checkov")
    if isinstance(existing, dict):
        skips = [*existing.get("skip", []), *skips]
    resource.add_metadata("checkov", {"skip": skips})


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            return str(arg[0]).join(_render(part) for part in arg[1])
    raise ValueError(f"cannot render {value!r} as a cdk-nag finding id")
