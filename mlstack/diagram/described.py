"""The diagram's node model (`Described`, `Child`) and the property readers every resource describer uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlstack.diagram.cfn import App, Key, short_name, text_of


@dataclass
class Child:
    """A node drawn for a part of a resource (an endpoint variant, a pipeline step, an instance group)."""

    suffix: str
    kind: str
    lines: list[str]
    refs_from: Any = None
    """A property value whose references become paths from this child (a variant's model)."""
    after: list[str] = field(default_factory=list)
    """Suffixes of sibling children this one follows (pipeline step order); none: a path from the parent."""


@dataclass
class Described:
    kind: str
    lines: list[str]
    group: str | None = None
    """Resources of one stack with the same group share one node: title once, then one item each."""
    fold_into: Key | None = None
    """Drawn as part of that resource's node: its label lines are appended there."""
    children: list[Child] = field(default_factory=list)
    role: str = ""
    """`vpc` or `subnet`: drawn as a box that holds other nodes."""
    zone: str = ""
    links: list[Key] = field(default_factory=list)
    """Extra paths not visible as references (a NAT gateway's route to the internet gateway)."""
    loop: str | None = None
    """A self-loop with this label (all-to-all traffic inside an EFA node group)."""


def props_of(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource.get("Properties", {})
    return props


def tag_of(props: dict[str, Any], key: str) -> str | None:
    tags = props.get("Tags", [])
    if isinstance(tags, dict):
        return str(tags[key]) if key in tags else None
    return next((str(t["Value"]) for t in tags if isinstance(t, dict) and t.get("Key") == key), None)


def span(low: Any, high: Any) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def cfn_text(value: Any) -> str:
    return text_of(value) or "*"


INTERESTING = ("InstanceType", "InstanceTypes", "InstanceCount", "MinvCpus", "MaxvCpus", "Priority", "Engine")


def generic(app: App, key: Key, r: dict[str, Any]) -> Described:
    kind = str(r.get("Type", "?"))
    service = kind.split("::")[1] if kind.count("::") == 2 else kind
    lines = [f"{kind.split('::')[-1]} {short_name(key[1])}", service if service != kind else ""]
    lines += interesting(props_of(r))
    category = {"Batch": "compute", "EC2": "compute", "EFS": "storage", "SQS": "messaging", "SNS": "messaging"}
    return Described(
        category.get(service, "ml" if service.startswith(("SageMaker", "Bedrock")) else "other"),
        [x for x in lines if x],
    )


def interesting(value: Any, depth: int = 0) -> list[str]:
    found: list[str] = []
    if isinstance(value, dict) and depth < 3:
        for name, item in sorted(value.items()):
            if name in INTERESTING and not isinstance(item, dict):
                shown = ", ".join(map(cfn_text, item)) if isinstance(item, list) else cfn_text(item)
                found.append(f"{name}: {shown}")
            else:
                found += interesting(item, depth + 1)
    return found
