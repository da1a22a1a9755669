"""Synthesized templates of one blueprint -> a graph: nodes with labels, the subnet or VPC each sits in, paths.

Generic over templates: a resource's type picks its node kind and label (`labels.describe`); a type not listed
there is still drawn with its type name, so a new stack needs no change here. Plumbing (IAM, routes,
security-group rules, policies, aliases, log groups) is left out. References between stacks are followed to
the resource the other stack exports. Everything is sorted, so the same templates always give the same graph.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mlstack.diagram.cfn import App, Key
from mlstack.diagram.described import Described
from mlstack.diagram.labels import EDGE_TARGET_KINDS, GROUPED_LINE_WIDTH, HIDDEN_TYPES, describe


@dataclass
class Node:
    id: str
    kind: str
    lines: list[str]
    place: str = ""
    """Subnet ID it sits in, `vpc:<VPC ID>` when it spans subnets, "" when regional (outside any VPC)."""
    grouped: bool = False


@dataclass
class Box:
    """A VPC or a subnet: a box that holds nodes."""

    id: str
    lines: list[str]
    parent: str = ""
    zone: str = ""


@dataclass
class Graph:
    title: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: set[tuple[str, str, str]] = field(default_factory=set)
    """(from, to, label); from == to is a self-loop (EFA all-to-all)."""
    vpcs: dict[str, Box] = field(default_factory=dict)
    subnets: dict[str, Box] = field(default_factory=dict)
    prefix: str = ""
    """Left out of node IDs: the blueprint name every stack name starts with."""

    def node_id(self, key: Key) -> str:
        return _ident(f"{key[0].removeprefix(self.prefix)}__{key[1]}")


def _ident(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def build(name: str, stacks: dict[str, dict[str, Any]], description: str = "") -> Graph:
    """The graph of blueprint `name` from its templates (CloudFormation stack name -> template JSON)."""
    app = App(stacks)
    graph = Graph(title=f"{name}: {description}" if description else name, prefix=f"{name}-")
    described = {key: describe(app, key, r) for key, r in app.resources.items() if r.get("Type") not in HIDDEN_TYPES}
    owner: dict[Key, str] = {}
    for key, d in described.items():
        if d.fold_into is None:
            owner[key] = _add(graph, key, d)
    for key in described:
        host = _host(key, described)
        if key not in owner and host in owner:
            owner[key] = owner[host]
            graph.nodes[owner[host]].lines += described[key].lines if owner[host] in graph.nodes else []
    for node in graph.nodes.values():
        if node.grouped:
            counts = Counter(node.lines[1:])
            items = [f"{item} x{n}" if n > 1 else item for item, n in sorted(counts.items())]
            node.lines = [node.lines[0], *_wrap(items)]
        else:
            node.lines = list(dict.fromkeys(line for line in node.lines if line))
    _subnet_vpcs(app, graph, owner)
    _place(app, graph, owner)
    _edges(app, graph, owner, described)
    _security_group_paths(app, graph, owner)
    return graph


def _wrap(items: list[str]) -> list[str]:
    rows: list[str] = []
    for item in items:
        if rows and len(rows[-1]) + len(item) + 2 <= GROUPED_LINE_WIDTH:
            rows[-1] += f", {item}"
        else:
            rows.append(item)
    return rows


def _host(key: Key, described: dict[Key, Described]) -> Key | None:
    """The drawn resource that `key` folds into, following folds of folds (a placement group -> launch template)."""
    seen: set[Key] = set()
    while (host := described[key].fold_into) is not None:
        if key in seen or host not in described:
            return None
        seen.add(key)
        key = host
    return key


def _add(graph: Graph, key: Key, d: Described) -> str:
    nid = graph.node_id((key[0], f"group_{d.group}") if d.group else key)
    if d.role == "vpc":
        graph.vpcs[nid] = Box(nid, d.lines)
    elif d.role == "subnet":
        graph.subnets[nid] = Box(nid, d.lines, zone=d.zone)
    elif nid in graph.nodes:
        graph.nodes[nid].lines += d.lines[1:]
    else:
        graph.nodes[nid] = Node(nid, d.kind, list(d.lines), grouped=d.group is not None)
    for child in d.children:
        cid = f"{nid}__{_ident(child.suffix)}"
        graph.nodes[cid] = Node(cid, child.kind, child.lines)
        for before in child.after:
            graph.edges.add((f"{nid}__{_ident(before)}", cid, ""))
        if not child.after:
            graph.edges.add((nid, cid, ""))
    if d.loop:
        graph.edges.add((nid, nid, d.loop))
    for link in d.links:
        graph.edges.add((nid, graph.node_id(link), ""))
    return nid


def _subnet_vpcs(app: App, graph: Graph, owner: dict[Key, str]) -> None:
    for key, nid in owner.items():
        if nid in graph.subnets:
            vpcs = [owner[t] for t in app.refs(key[0], app.resources[key].get("Properties", {})) if t in owner]
            graph.subnets[nid].parent = next((v for v in vpcs if v in graph.vpcs), "")


def _place(app: App, graph: Graph, owner: dict[Key, str]) -> None:
    """Put a node in the one subnet it references, or in its VPC when it references several subnets or the VPC."""
    targets: dict[str, set[str]] = {}
    for key, nid in owner.items():
        refs = app.refs(key[0], app.resources[key].get("Properties", {}))
        targets.setdefault(nid, set()).update(owner[t] for t in refs if t in owner)
    for nid, found in sorted(targets.items()):
        node = graph.nodes.get(nid)
        if node is None:
            continue
        subnets = sorted(t for t in found if t in graph.subnets)
        vpcs = sorted(t for t in found if t in graph.vpcs)
        if len(subnets) == 1:
            node.place = subnets[0]
        elif subnets:
            node.place = "vpc:" + graph.subnets[subnets[0]].parent
            names = sorted({graph.subnets[s].lines[0].split(" ")[0] for s in subnets})
            zones = sorted({graph.subnets[s].zone for s in subnets})
            node.lines.append(f"{'/'.join(names)} subnets, {', '.join(zones)}")
        elif vpcs:
            node.place = "vpc:" + vpcs[0]
    for node in graph.nodes.values():
        if "__" in node.id and node.id.rsplit("__", 1)[0] in graph.nodes and not node.place:
            node.place = graph.nodes[node.id.rsplit("__", 1)[0]].place  # a child sits with its parent


def _edges(app: App, graph: Graph, owner: dict[Key, str], described: dict[Key, Described]) -> None:
    """A path from a node to each drawn node of a data/traffic/control kind that it references."""
    for key, source in owner.items():
        if source not in graph.nodes:
            continue
        d = described[key]
        values: list[tuple[str, Any]] = [(source, app.resources[key].get("Properties", {}))]
        values += [(f"{source}__{c.suffix}", c.refs_from) for c in d.children if c.refs_from is not None]
        for origin, value in values:
            for target_key in app.refs(key[0], value):
                target = owner.get(target_key)
                if target is None or target not in graph.nodes or target == source:
                    continue
                if graph.nodes[target].kind in EDGE_TARGET_KINDS:
                    graph.edges.add((origin, target, ""))
    # An endpoint reaches its model through its variants: drop the direct endpoint -> model path.
    for source, target, label in sorted(graph.edges):
        if any(
            (source, mid, "") in graph.edges and (mid, target, "") in graph.edges for mid in _children(graph, source)
        ):
            graph.edges.discard((source, target, label))


def _children(graph: Graph, nid: str) -> list[str]:
    return [n for n in graph.nodes if n.startswith(nid + "__")]


def _security_group_paths(app: App, graph: Graph, owner: dict[Key, str]) -> None:
    """Traffic the security groups allow between drawn nodes: node using group B -> node using group A, when A
    accepts B (nodes to FSx on the Lustre ports, clients to the interface endpoints on 443)."""
    users: dict[Key, set[str]] = {}
    for key, nid in owner.items():
        for target in app.refs(key[0], app.resources[key].get("Properties", {})):
            if app.resources[target].get("Type") == "AWS::EC2::SecurityGroup" and nid in graph.nodes:
                users.setdefault(target, set()).add(nid)
    ports: dict[tuple[str, str], set[str]] = {}
    rules = [
        (key, r.get("Properties", {}).get("GroupId"), r.get("Properties", {}))
        for key, r in app.of_type("AWS::EC2::SecurityGroupIngress")
    ]
    rules += [
        (key, {"Ref": key[1]}, rule)
        for key, r in app.of_type("AWS::EC2::SecurityGroup")
        for rule in r.get("Properties", {}).get("SecurityGroupIngress", []) or []
    ]
    for key, group, rule in rules:
        for dest in app.refs(key[0], group):
            for source in app.refs(key[0], rule.get("SourceSecurityGroupId")):
                for a in sorted(users.get(source, set())):
                    for b in sorted(users.get(dest, set()) - {a}):
                        ports.setdefault((a, b), set()).add(_ports(rule))
    labels = {
        pair: "all traffic" if "all" in found else "tcp " + ", ".join(sorted(found, key=_port_order))
        for pair, found in ports.items()
    }
    for (a, b), label in sorted(labels.items()):
        if labels.get((b, a)) == label:  # one edge with arrows at both ends (Lustre LNET: either side connects)
            if a < b:
                graph.edges.add((a, b, f"{label} (both ways)"))
        else:
            graph.edges.add((a, b, label))


def _ports(rule: dict[str, Any]) -> str:
    low, high = rule.get("FromPort"), rule.get("ToPort")
    if str(rule.get("IpProtocol")) == "-1" or low is None:
        return "all"
    return f"{low}" if low == high else f"{low}-{high}"


def _port_order(text: str) -> tuple[int, str]:
    head = text.split("-")[0]
    return (int(head), text) if head.isdigit() else (0, text)
