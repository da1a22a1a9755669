"""The blueprint path passes every construct prop explicitly: each construct call in `mlstack/stacks/` names every
keyword-only parameter of the construct (directly, or through a props helper that returns a dict literal), so a
changed construct default never changes a blueprint silently. Constructs keep their defaults for teams that use
them directly. Read with `ast`; the constructs' signatures with `inspect`."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

from tests.synth import ROOT

STACKS = ROOT / "mlstack" / "stacks"


def _helpers() -> dict[str, ast.FunctionDef]:
    """Every module-level function of the stacks package, by name (props helpers such as `fsx_props`)."""
    found: dict[str, ast.FunctionDef] = {}
    for path in STACKS.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = node
    return found


def _dict_keys(function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef] | None = None) -> set[str] | None:
    """The keys every `return {...}` of `function` gives, following a `return helper(...)` of another stacks
    helper (None if some return is neither)."""
    keys: set[str] | None = None
    for node in ast.walk(function):
        if isinstance(node, ast.Return):
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and helpers
                and value.func.id in helpers
            ):
                callee = helpers[value.func.id]
                these_or_none = None if callee is function else _dict_keys(callee, helpers)
                if these_or_none is None:
                    return None
                these = these_or_none
            elif not isinstance(value, ast.Dict) or None in value.keys:
                return None
            else:
                these = {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            keys = these if keys is None else keys & these
    return keys


def given_keywords(call: ast.Call, helpers: dict[str, ast.FunctionDef]) -> tuple[set[str], list[str]]:
    """(keywords the call names, the splats it could not read)."""
    given: set[str] = set()
    unread: list[str] = []
    for keyword in call.keywords:
        if keyword.arg is not None:
            given.add(keyword.arg)
            continue
        value = keyword.value
        helper = (
            helpers.get(value.func.id) if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) else None
        )
        keys = _dict_keys(helper, helpers) if helper is not None else None
        if keys is None:
            unread.append(ast.unparse(value))
        else:
            given |= keys
    return given, unread


def missing_props(construct: type, call: ast.Call, helpers: dict[str, ast.FunctionDef]) -> list[str]:
    given, unread = given_keywords(call, helpers)
    parameters = inspect.signature(construct.__init__).parameters.values()  # type: ignore[misc]
    missing = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.name not in given]
    return [*missing, *(f"**{u} (unread)" for u in unread)]


def construct_calls() -> Iterator[tuple[str, type, ast.Call]]:
    for path in sorted(STACKS.glob("*.py")):
        module = importlib.import_module(f"mlstack.stacks.{path.stem}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                target = getattr(module, node.func.id, None)
                if inspect.isclass(target) and target.__module__.startswith("mlstack.constructs."):
                    yield f"{path.name}:{node.lineno} {target.__name__}", target, node


def test_every_construct_call_of_a_stack_names_every_prop() -> None:
    helpers = _helpers()
    gaps = {where: m for where, construct, call in construct_calls() if (m := missing_props(construct, call, helpers))}
    assert not gaps, f"stacks leave construct props to their defaults: {gaps}"


def test_the_check_sees_a_prop_left_to_its_default() -> None:
    class Construct:
        def __init__(self, scope: object, id_: str, *, size: int = 1, name: str = "x") -> None: ...

    source = "def props():\n    return {'name': 'y'}\nConstruct(s, 'A', **props())\nConstruct(s, 'B', **other)\n"
    tree = ast.parse(source)
    helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    first, second = [n.value for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert missing_props(Construct, first, helpers) == ["size"]
    assert missing_props(Construct, second, helpers) == ["size", "name", "**other (unread)"]


def test_the_stacks_folder_is_read() -> None:
    assert len(list(construct_calls())) > 20
    assert Path(STACKS / "network.py").exists()
