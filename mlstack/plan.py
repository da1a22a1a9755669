"""`mlstack plan`: what a blueprint creates, what it costs per hour and month, which quotas it needs.

Computed from the validated blueprint alone: no synth, no AWS call. Each layer adds its part with a
`plan_<layer>(config, plan)` function; prices carry their date and source, and unknown prices stay unknown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mlstack.config import BlueprintConfig
from mlstack.console import render_table

HOURS_PER_MONTH = 730
"""AWS pricing pages' convention for a month of on-demand use."""

# VPC prices, us-east-1, from the Amazon VPC pricing page (NAT gateway hour, PrivateLink endpoint hour per AZ).
# Not re-checked offline: data processing ($/GB) is not included.
NAT_GATEWAY_PER_HOUR = 0.045
INTERFACE_ENDPOINT_PER_AZ_HOUR = 0.01
VPC_PRICE_DATE: str | None = None  # not re-verified offline: see the source line
VPC_PRICE_SOURCE = (
    "Amazon VPC pricing page, us-east-1 list price as remembered (NAT $0.045/h, PrivateLink $0.01/AZ-h), "
    "not re-verified offline; per-GB processing extra"
)


@dataclass(frozen=True)
class Resource:
    stack: str
    kind: str
    detail: str
    count: int = 1


@dataclass(frozen=True)
class Cost:
    item: str
    quantity: float
    unit_per_hour: float | None
    """USD per unit-hour; None when no price is known (the plan says so instead of guessing)."""
    price_date: str | None
    source: str

    @property
    def per_hour(self) -> float | None:
        return None if self.unit_per_hour is None else self.unit_per_hour * self.quantity


@dataclass(frozen=True)
class Quota:
    service: str
    name: str
    code: str
    needed: float
    unit: str = ""


@dataclass
class Plan:
    blueprint: str
    description: str
    region: str
    removal: str
    stacks: list[str] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    costs: list[Cost] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    """Layer-specific facts (nodes, accelerators, EFA, storage, manifests) for the text and JSON views."""

    @property
    def per_hour(self) -> float:
        """Sum of the known hourly costs (see `unpriced` for what is missing)."""
        return sum(c.per_hour for c in self.costs if c.per_hour is not None)

    @property
    def per_month(self) -> float:
        return self.per_hour * HOURS_PER_MONTH

    @property
    def unpriced(self) -> list[str]:
        return [c.item for c in self.costs if c.unit_per_hour is None]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["costs"] = [{**asdict(c), "per_hour": c.per_hour} for c in self.costs]
        data["per_hour"] = round(self.per_hour, 4)
        data["per_month"] = round(self.per_month, 2)
        data["hours_per_month"] = HOURS_PER_MONTH
        data["unpriced"] = self.unpriced
        return data


def plan_network(config: BlueprintConfig, plan: Plan) -> None:
    net = config.network
    zones = config.zones
    stack = "NetworkStack"
    plan.resources.append(Resource(stack, "VPC", f"{net.cidr} across {', '.join(zones)}"))
    kind = "isolated (no NAT)" if net.nat_gateways == 0 else "private with NAT egress"
    plan.resources.append(Resource(stack, "Private subnet", f"/{net.private_subnet_mask}, {kind}", len(zones)))
    if net.nat_gateways:
        plan.resources.append(Resource(stack, "NAT gateway", "with an Elastic IP", net.nat_gateways))
        plan.costs.append(Cost("NAT gateway", net.nat_gateways, NAT_GATEWAY_PER_HOUR, VPC_PRICE_DATE, VPC_PRICE_SOURCE))
        plan.quotas.append(Quota("ec2", "EC2-VPC Elastic IPs", "L-0263D0A3", net.nat_gateways))
    if net.interface_endpoints:
        plan.resources.append(
            Resource(stack, "Interface endpoint", ", ".join(net.interface_endpoints), len(net.interface_endpoints))
        )
        plan.costs.append(
            Cost(
                f"Interface endpoints ({len(net.interface_endpoints)} x {len(zones)} AZs)",
                len(net.interface_endpoints) * len(zones),
                INTERFACE_ENDPOINT_PER_AZ_HOUR,
                VPC_PRICE_DATE,
                VPC_PRICE_SOURCE,
            )
        )
    for gateway in net.gateway_endpoints:
        plan.resources.append(Resource(stack, "Gateway endpoint", gateway))
    plan.resources.append(Resource(stack, "KMS key", "customer-managed, rotation on; shared by every stack"))
    plan.resources.append(
        Resource(stack, "Flow logs", f"CloudWatch Logs, {net.flow_logs.retention_days} days, KMS-encrypted")
    )
    plan.quotas.append(Quota("vpc", "VPCs per Region", "L-F678F1CE", 1))
    if config.removal == "destroy":
        plan.warnings.append("removal: destroy — keys, logs, buckets and file systems are deleted with their stacks")


def build_plan(config: BlueprintConfig) -> Plan:
    plan = Plan(
        blueprint=config.name,
        description=config.description,
        region=config.env.region,
        removal=config.removal,
        stacks=config.stack_ids,
    )
    plan_network(config, plan)
    if config.training is not None and config.training.engine != "eks":
        from mlstack.stacks.training_engines_plan import plan_training_engine

        plan_training_engine(config, plan)
    elif config.training is not None:
        from mlstack.stacks.training_plan import plan_training

        plan_training(config, plan)
    if config.inference is not None:
        from mlstack.stacks.inference_plan import plan_inference

        plan_inference(config, plan)
    if config.mlops is not None:
        from mlstack.stacks.mlops_plan import plan_mlops

        plan_mlops(config, plan)
    if config.ai_services is not None:
        from mlstack.stacks.ai_services_plan import plan_ai_services

        plan_ai_services(config, plan)
    return plan


def render(plan: Plan) -> str:
    """The human view: aligned tables."""
    lines = [f"Blueprint {plan.blueprint}: {plan.description}", f"Region {plan.region}; removal: {plan.removal}", ""]
    lines.append("Stacks: " + ", ".join(plan.stacks))
    lines.append("")
    lines += _table_lines(
        ["stack", "resource", "count", "detail"], [[r.stack, r.kind, str(r.count), r.detail] for r in plan.resources]
    )
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
            c.price_date or "undated",
        ]
        for c in plan.costs
    ]
    lines += _table_lines(["cost item", "qty", "unit $/h", "$/h", "price date"], cost_rows)
    lines.append(
        f"Total (known prices): ${plan.per_hour:,.2f}/hour, ${plan.per_month:,.0f}/month ({HOURS_PER_MONTH} h)"
    )
    if plan.unpriced:
        lines.append("No price known for: " + ", ".join(plan.unpriced))
    sources = sorted({c.source for c in plan.costs})
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


def _table_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    return render_table(headers, rows).split("\n")
