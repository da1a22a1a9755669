"""The human and JSON views of an access `Report`, and the one-line summary `mlstack plan` shows."""

from __future__ import annotations

from typing import Any

from mlstack.access.calls import KINDS, SOURCES
from mlstack.access.evaluate import Report
from mlstack.console import render_table

_DECISIONS = {
    "Allowed": "allowed",
    "ImplicitlyDenied": "DENIED (no allow)",
    "ExplicitlyDenied": "DENIED (explicit deny)",
    "Error": "ERROR",
}


def summary(report: Report) -> str:
    denied = len(report.denied)
    verdict = "all allowed" if not denied else f"{denied} denied"
    return (
        f"Run-time access: {len(report.calls)} calls of {len(report.principals)} principals checked, {verdict}"
        f" (mlstack access {report.blueprint})"
    )


def render(report: Report) -> str:
    lines = [f"Blueprint {report.blueprint}: the calls its run-time principals make, decided by its policies", ""]
    for principal in report.principals:
        uses = "; ".join(f"{KINDS[u.kind][0]}: {u.what}" for u in principal.uses)
        lines.append(f"{principal.label}  ({principal.arn})")
        lines.append(f"  {uses}")
        rows: list[list[str]] = []
        for c in report.calls:
            row = [c.action, c.resource, _DECISIONS.get(c.decision, c.decision), c.statement]
            row.append(SOURCES[c.source][0])
            if c.role_arn == principal.arn and row not in rows:  # same call with other context values: one row
                rows.append(row)
        if rows:
            table = render_table(["call", "resource", "decision", "statement", "source"], rows)
            lines += ["  " + line for line in table.split("\n")]
        else:
            lines.append("  no calls that services make with this role")
        lines.append("")
    used = sorted({c.source for c in report.calls})
    lines += [f"source: {SOURCES[s][0]}: {SOURCES[s][1]}" for s in used]
    lines += ["", summary(report)]
    return "\n".join(lines)


def to_json(report: Report) -> dict[str, Any]:
    return {
        "blueprint": report.blueprint,
        "principals": [
            {
                "principal": p.label,
                "role": p.arn,
                "uses": [{"kind": u.kind, "for": u.what} for u in p.uses],
                "calls": [c.to_json() for c in report.calls if c.role_arn == p.arn],
            }
            for p in report.principals
        ],
        "calls": len(report.calls),
        "denied": len(report.denied),
    }
