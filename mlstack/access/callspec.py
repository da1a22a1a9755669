"""`CallSpec`: one call a run-time principal makes (action, resource pattern, context), the unit of
`mlstack.access.calls`'s table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallSpec:
    action: str
    resource: str
    source: str
    each: str = ""
    context: tuple[tuple[str, str], ...] = ()
    either: str = ""


def call(action: str, resource: str, source: str, each: str = "") -> CallSpec:
    return CallSpec(action, resource, source, each)


def call_with(
    action: str, resource: str, source: str, each: str, context: dict[str, str], either: str = ""
) -> CallSpec:
    return CallSpec(action, resource, source, each, tuple(context.items()), either)
