"""The resources of each stack that the layer modules do not describe one by one (roles, policies, rules,
CDK-internal providers): what the design's footprint holds beyond the described rows."""

from __future__ import annotations

from collections import Counter

from mlstack.plan.model import Plan, Resource


def add_supporting(plan: Plan, footprint: dict[str, Counter[str]]) -> None:
    """Append, per stack and type, a supporting row for the footprint's resources no row describes yet."""
    described: Counter[tuple[str, str]] = Counter()
    for row in plan.resources:
        if row.type is not None:
            described[(row.stack, row.type)] += row.count
    for stack, types in footprint.items():
        for type_, count in sorted(types.items()):
            rest = count - described[(stack, type_)]
            if rest > 0:
                plan.resources.append(Resource(stack, _label(type_), "supporting", rest, type_, supporting=True))


def _label(type_: str) -> str:
    """`AWS::IAM::Role` -> `IAM Role`; `Custom::VpcRestrictDefaultSG` -> `Custom VpcRestrictDefaultSG`."""
    parts = type_.split("::")
    return " ".join(parts[1:] if parts[0] == "AWS" else parts)
