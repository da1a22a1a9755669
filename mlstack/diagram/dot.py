"""A diagram graph -> Graphviz DOT source (deterministic: sorted nodes, boxes and edges)."""

from __future__ import annotations

from collections import defaultdict

from mlstack.diagram.model import Graph, Node

STYLE: dict[str, tuple[str, str]] = {
    # kind: (fill colour, shape)
    "network": ("#dbe9f6", "box"),
    "endpoints": ("#dbe9f6", "note"),
    "compute": ("#fde2c4", "box3d"),
    "cluster": ("#f9c98f", "box"),
    "storage": ("#d4edc9", "cylinder"),
    "ml": ("#e6d9f2", "box"),
    "step": ("#f1ebf8", "box"),
    "entry": ("#fff3b0", "box"),
    "messaging": ("#fbe0e6", "box"),
    "security": ("#e0e0e0", "box"),
    "ops": ("#f2f2f2", "box"),
    "k8s": ("#d9eef2", "folder"),
    "other": ("#f2f2f2", "box"),
}


SUBNET_STYLE = 'style="filled,rounded" fillcolor="#f4f8fc" color="#9dbbd9" fontsize=11'


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(lines: list[str]) -> str:
    return _quote("\n".join(lines)).replace("\n", "\\n")


def _node(node: Node, indent: str) -> str:
    fill, shape = STYLE.get(node.kind, STYLE["other"])
    bold = ' fontname="Helvetica-Bold"' if node.kind in ("cluster", "compute") else ""
    return f'{indent}{node.id} [label={_label(node.lines)} shape={shape} fillcolor="{fill}"{bold}];'


def render(graph: Graph) -> str:
    by_place: dict[str, list[Node]] = defaultdict(list)
    for node in sorted(graph.nodes.values(), key=lambda n: n.id):
        by_place[node.place].append(node)
    out = [
        f"digraph {_quote(graph.title)} {{",
        f"  graph [label={_quote(graph.title)} labelloc=t fontsize=18 fontname=Helvetica rankdir=LR"
        " compound=true nodesep=0.25 ranksep=0.5 bgcolor=white];",
        '  node [fontname=Helvetica fontsize=10 style="filled,rounded" margin="0.12,0.06"];',
        '  edge [fontname=Helvetica fontsize=9 color="#555555"];',
    ]
    for vpc in sorted(graph.vpcs.values(), key=lambda b: b.id):
        out += [
            f"  subgraph cluster_{vpc.id} {{",
            f'    label={_label(vpc.lines)} style=rounded color="#3b78b5" fontsize=14;',
        ]
        out += [_node(n, "    ") for n in by_place.pop(f"vpc:{vpc.id}", [])]
        subnets = sorted((s for s in graph.subnets.values() if s.parent == vpc.id), key=lambda s: (s.zone, s.id))
        for zone in sorted({s.zone for s in subnets}):
            out += [
                f"    subgraph cluster_{vpc.id}_{_ident(zone)} {{",
                f"      label={_quote(zone)} style=dashed fontsize=12;",
            ]
            for subnet in (s for s in subnets if s.zone == zone):
                out += [
                    f"      subgraph cluster_{subnet.id} {{",
                    f"        label={_label(subnet.lines)} {SUBNET_STYLE};",
                ]
                members = by_place.pop(subnet.id, [])
                out += [_node(n, "        ") for n in members]
                if not members:
                    out.append(f'        {subnet.id} [label="" shape=point style=invis];')
                out.append("      }")
            out.append("    }")
        out.append("  }")
    for place in sorted(by_place):
        out += [_node(n, "  ") for n in by_place[place]]
    for source, target, label in sorted(graph.edges):
        if source == target:  # all-to-all inside a group (EFA)
            attrs = f' [label={_quote(label)} dir=both color="#c0392b" penwidth=2]'
        elif label:  # traffic a security group allows
            both = " dir=both" if label.endswith("(both ways)") else ""
            attrs = f' [label={_quote(label)} color="#2e7d32" style=dashed{both}]'
        else:
            attrs = ""
        out.append(f"  {source} -> {target}{attrs};")
    out.append("}")
    return "\n".join(out) + "\n"


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)
