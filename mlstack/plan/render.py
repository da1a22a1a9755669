"""The human view of a `Plan`: aligned plain-text tables (`mlstack.console.render_table`; JSON is `Plan.to_json`)."""

from __future__ import annotations

from mlstack.console import render_table
from mlstack.plan.model import HOURS_PER_MONTH, Plan


def render(plan: Plan) -> str:
    """The human view: aligned tables."""
    lines = [f"Blueprint {plan.blueprint}: {plan.description}", f"Region {plan.region}; removal: {plan.removal}", ""]
    lines.append("Stacks: " + ", ".join(plan.stacks))
    lines.append("")
    lines += _table_lines(
        ["stack", "resource", "count", "detail"],
        [[r.stack, r.kind, str(r.count), r.detail] for r in plan.resources if not r.supporting],
    )
    lines += _supporting_lines(plan)
    for title, rows in plan.details.get("sections", []):
        lines += ["", title]
        lines += [f"  {row}" for row in rows]
    lines.append("")
    cost_rows = [
        [
            c.item,
            f"{c.quantity:g}",
            "unknown" if c.unit_per_hour is None else f"${c.unit_per_hour:,.4f}",
            "unknown" if c.per_hour is None else f"${c.per_hour:,.2f}",
            c.price_date or "-",
        ]
        for c in plan.costs
    ]
    lines += _table_lines(["cost item", "qty", "unit $/h", "$/h", "price date"], cost_rows)
    lines.append(
        f"Total (known prices): ${plan.per_hour:,.2f}/hour, ${plan.per_month:,.0f}/month ({HOURS_PER_MONTH} h)"
    )
    if plan.unpriced:
        lines.append("No price known for: " + ", ".join(plan.unpriced))
        lines += [f"  {item}: {why}" for item, why in plan.unpriced_reasons.items()]
    sources = sorted({c.source for c in plan.costs if c.unit_per_hour is not None})
    lines += [f"  price source: {s}" for s in sources]
    lines.append("")
    lines += _table_lines(
        ["service", "quota", "code", "needed"],
        [[q.service, q.name, q.code, f"{q.needed:g}{(' ' + q.unit) if q.unit else ''}"] for q in plan.quotas],
    )
    if plan.warnings:
        lines.append("")
        lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)


def _supporting_lines(plan: Plan) -> list[str]:
    """One line per stack for the supporting resources (each type and count is in `--json`)."""
    by_stack: dict[str, list[str]] = {}
    for row in plan.resources:
        if row.supporting:
            by_stack.setdefault(row.stack, []).append(f"{row.kind} {row.count}")
    if not by_stack:
        return []
    lines = ["", "Supporting resources (roles, policies, routes, rules, CDK providers):"]
    for stack, items in by_stack.items():
        lines.append(f"  {stack}: {', '.join(items)}")
    return lines


def _table_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    return render_table(headers, rows).split("\n")
