"""The shape of the `mlstack` package: no import cycle, no module over 450 lines.

Imports are read with `ast`, not by importing: module-level imports, the ones inside functions (the lazy
imports that hide a cycle from Python) and the ones under `if TYPE_CHECKING:` (type-only, a cycle all the same)
all count. `_KNOWN_CYCLES` and `_KNOWN_LONG_MODULES` list today's offenders explicitly; each entry must
still offend (so the lists only shrink) and nothing else may.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.synth import ROOT

PACKAGE = ROOT / "mlstack"
MAX_LINES = 450

_KNOWN_CYCLES: set[frozenset[str]] = set()
"""Groups of modules that reach each other through imports today (issue 10 removes them; then empty this)."""

_KNOWN_LONG_MODULES: set[str] = set()
"""Modules over MAX_LINES today (issue 10 splits them; then empty this)."""


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if "_shipped" in rel.parts:  # links to runtime/ (Lambda code), not part of the package's import graph
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every module name an import statement anywhere in `tree` names, `if TYPE_CHECKING:` blocks included: a
    type-only cycle still ties the two modules together (neither can be read, moved or tested alone)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source
            for alias in node.names:
                yield f"{source}.{alias.name}"  # `from pkg import submodule`
        yield from _imports(node, module, is_package)


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set(_imports(tree, name, path.name == "__init__.py"))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of two or more modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def cycle_in(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """One concrete import cycle inside a strongly connected group, for the failure message."""
    members = set(group)
    start = group[0]
    path = [start]
    seen = {start}
    node = start
    while True:
        nxt = sorted(graph[node] & members)
        back = [n for n in nxt if n == start]
        if back and len(path) > 1:
            return [*path, start]
        step = next((n for n in nxt if n not in seen), None)
        if step is None:  # every neighbour seen: close the loop at the first one on the path
            loop_at = next(n for n in nxt if n in seen)
            return [*path[path.index(loop_at) :], loop_at]
        path.append(step)
        seen.add(step)
        node = step


def test_no_import_cycle_beyond_the_known_ones() -> None:
    graph = import_graph()
    groups = {frozenset(g): g for g in strongly_connected(graph)}
    new = [
        f"{', '.join(g)}: e.g. {' -> '.join(cycle_in(graph, g))}"
        for key, g in groups.items()
        if key not in _KNOWN_CYCLES
    ]
    assert not new, "import cycle(s) in mlstack/ (lazy imports count):\n" + "\n".join(new)
    gone = [sorted(k) for k in _KNOWN_CYCLES if k not in groups]
    assert not gone, f"no longer a cycle: remove from _KNOWN_CYCLES: {gone}"


def test_no_module_over_the_line_limit_beyond_the_known_ones() -> None:
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    new = {name: n for name, n in long.items() if name not in _KNOWN_LONG_MODULES}
    assert not new, f"modules over {MAX_LINES} lines (split them): {new}"
    gone = sorted(_KNOWN_LONG_MODULES - set(long))
    assert not gone, f"no longer over {MAX_LINES} lines: remove from _KNOWN_LONG_MODULES: {gone}"


def test_lazy_and_type_checking_imports_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mlstack.hidden import X\nelse:\n    import mlstack.runs\n"
        "def f() -> None:\n    from mlstack.lazy import helper\n"
        "from . import sibling\n"
        "from ..up import thing\n"
    )
    names = set(_imports(ast.parse(source), "mlstack.pkg.mod", is_package=False))
    assert {"mlstack.lazy", "mlstack.lazy.helper", "mlstack.runs", "mlstack.pkg.sibling", "mlstack.up"} <= names
    assert "mlstack.hidden" in names


def test_cycle_finder_reports_each_group_once_with_a_real_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    groups = strongly_connected(graph)
    assert sorted(groups) == [["a", "b", "c"], ["e", "f"]]
    assert cycle_in(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def _layer_imports(graph: dict[str, set[str]], source: str, target: str) -> list[str]:
    return sorted(
        f"{name} -> {t}"
        for name, targets in graph.items()
        if name == source or name.startswith(source + ".")
        for t in targets
        if t == target or t.startswith(target + ".")
    )


def test_no_stack_imports_the_plan() -> None:
    # Stacks map the design onto props; the plan prices and explains the same design. A stack that reads the plan
    # builds what the plan says instead of what the design says.
    assert not _layer_imports(import_graph(), "mlstack.stacks", "mlstack.plan")


def test_no_construct_imports_config_stacks_or_plan() -> None:
    graph = import_graph()
    for layer in ("mlstack.config", "mlstack.stacks", "mlstack.plan", "mlstack.design"):
        assert not _layer_imports(graph, "mlstack.constructs", layer), layer


def test_design_and_plan_never_import_the_cdk() -> None:
    offenders = []
    for name, path in _modules().items():
        if not name.startswith(("mlstack.design", "mlstack.plan")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [
            f"{name} -> {t}"
            for t in _imports(tree, name, path.name == "__init__.py")
            if t.split(".")[0] in ("aws_cdk", "constructs", "jsii", "cdk_nag")
        ]
    assert not offenders


def test_the_checks_fail_on_a_synthetic_circle_and_a_stack_importing_the_plan() -> None:
    # The checks above must be able to fail: a type-only circle and a stack that reads the plan.
    source_a = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlstack.b import B\n"
    source_b = "from mlstack.a import A\n"
    graph = {
        "mlstack.a": set(_imports(ast.parse(source_a), "mlstack.a", False)) & {"mlstack.b"},
        "mlstack.b": set(_imports(ast.parse(source_b), "mlstack.b", False)) & {"mlstack.a"},
    }
    assert strongly_connected(graph) == [["mlstack.a", "mlstack.b"]]
    stacks = {"mlstack.stacks.x": {"mlstack.plan.training"}, "mlstack.plan.training": set()}
    assert _layer_imports(stacks, "mlstack.stacks", "mlstack.plan") == ["mlstack.stacks.x -> mlstack.plan.training"]


def test_the_schema_imports_no_construct() -> None:
    # config -> design -> stacks -> constructs: the values both share live below both (mlstack.common).
    assert not _layer_imports(import_graph(), "mlstack.config", "mlstack.constructs")
