"""mypy reads only the aws_cdk and moto modules this code can reach (pyproject.toml, `[[tool.mypy.overrides]]`).

aws_cdk's root module imports every one of its ~360 service modules for type checkers (`if typing.TYPE_CHECKING`),
so mypy, told nothing, analyses all of them: 33 of a cold run's 38 s of module time, aws_kinesisanalyticsv2 alone
5.7 s. The others are skipped (`follow_imports = "skip"`, the same as an untyped import), which would silently
make a newly imported one `Any`: this test fails first, naming the modules to add to the list.

moto likewise: its core imports `moto.backends`, which imports every service's models for type checkers (673
modules). mypy follows moto's core and the moto modules this code imports; a test names any other it imports.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CDK = Path(str(importlib.util.find_spec("aws_cdk").origin)).parent  # type: ignore[union-attr]
"""Found, not imported: importing aws_cdk starts its jsii kernel."""
MOTO = Path(str(importlib.util.find_spec("moto").origin)).parent  # type: ignore[union-attr]
SOURCES = ("mlstack", "tests", "runtime", "bench", "app.py")
_CDK_IMPORT = re.compile(r"^\s*(?:import aws_cdk\.|from aws_cdk\.|from \.\.)([a-z0-9_]+)", re.M)


def _mypy_config() -> dict[str, object]:
    config: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def _followed() -> set[str]:
    """The modules (and `package.*` patterns) the overrides let mypy follow."""
    overrides: list[dict[str, object]] = _mypy_config()["overrides"]  # type: ignore[assignment]
    found: set[str] = set()
    for override in overrides:
        if override.get("follow_imports") == "normal":
            modules = override["module"]
            found |= {str(m) for m in (modules if isinstance(modules, list) else [modules])}
    return found


def _trees(root: Path, sources: Sequence[str]) -> list[ast.Module]:
    """The syntax tree of every file under `sources` that mypy checks (its `exclude` left out) and whose text names
    aws_cdk or moto: a file that names neither imports neither, so the checks below find nothing in it (parsing all
    485 files took 3 s of CPU; those 142, about 1.2 s)."""
    return list(_parse(root, sources))


@functools.cache
def _checkout_imports() -> tuple[frozenset[str], frozenset[str]]:
    """This checkout's aws_cdk service modules and moto modules (`_cdk_modules_in`, `_moto_imports_in`), parsed
    once per process. The results are kept, not the trees: held for a pytest worker's life, the trees' million or
    so objects made each of its later garbage-collection passes walk them."""
    trees = _trees(ROOT, SOURCES)
    return frozenset(_cdk_modules_in(trees)), frozenset(_moto_imports_in(trees))


def _is_checkout(root: Path, sources: Sequence[str]) -> bool:
    return (root, tuple(sources)) == (ROOT, SOURCES)


def _parse(root: Path, sources: Sequence[str]) -> Iterator[ast.Module]:
    excluded = [re.compile(pattern) for pattern in _mypy_config()["exclude"]]  # type: ignore[attr-defined]
    for source in sources:
        path = root / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(pattern.search(file.relative_to(root).as_posix()) for pattern in excluded):
                text = file.read_text(encoding="utf-8")
                if "aws_cdk" in text or "moto" in text:
                    yield ast.parse(text)


def _our_cdk_modules(root: Path = ROOT, sources: Sequence[str] = SOURCES) -> set[str]:
    """aws_cdk's service modules that the type-checked code under `root` imports or names."""
    return set(_checkout_imports()[0]) if _is_checkout(root, sources) else _cdk_modules_in(_trees(root, sources))


def _cdk_modules_in(trees: Sequence[ast.Module]) -> set[str]:
    services = {p.parent.name for p in CDK.glob("*/__init__.py")}
    found: set[str] = set()
    for tree in trees:
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "aws_cdk"
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if node.attr in services:  # `cdk.aws_s3.Bucket` after `import aws_cdk as cdk`
                    found.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "aws_cdk":
                found |= {alias.name for alias in node.names if alias.name in services}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aws_cdk."):
                found.add(str(node.module).split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("aws_cdk.")}
    return found


def reachable(modules: set[str]) -> set[str]:
    """`modules` and every aws_cdk service module their own sources import, transitively."""
    seen: set[str] = set()
    todo = sorted(modules)
    while todo:
        module = todo.pop()
        source = CDK / module / "__init__.py"
        if module in seen or not source.exists():
            continue
        seen.add(module)
        todo += _CDK_IMPORT.findall(source.read_text(encoding="utf-8"))
    return seen


_INTERFACES_IMPORT = re.compile(r"^\s*import aws_cdk\.interfaces\.([a-z0-9_]+)\b", re.M)


def reachable_interfaces(modules: set[str]) -> set[str]:
    """The `aws_cdk.interfaces` modules that the root and `modules` import (as `import aws_cdk.interfaces.X as
    _x`), transitively through the interfaces modules' own imports."""
    sources = [CDK / "__init__.py", *(CDK / m / "__init__.py" for m in sorted(modules))]
    todo = [name for source in sources if source.exists() for name in _INTERFACES_IMPORT.findall(source.read_text())]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        source = CDK / "interfaces" / name / "__init__.py"
        if name in seen or not source.exists():
            continue
        seen.add(name)
        todo += _INTERFACES_IMPORT.findall(source.read_text(encoding="utf-8"))
    return seen


@functools.cache
def _reached() -> frozenset[str]:
    """The service modules this code reaches (read once per process: it parses every source and 80 MB of aws_cdk)."""
    return frozenset(reachable(_our_cdk_modules()))


@functools.cache
def _reached_interfaces() -> frozenset[str]:
    return frozenset(reachable_interfaces(set(_reached())))


def test_mypy_follows_every_aws_cdk_module_the_code_can_reach() -> None:
    followed = _followed()
    # The root and the interfaces package: their own types (IResource, IEnvironmentAware) would otherwise be Any.
    assert {"aws_cdk", "aws_cdk.interfaces"} <= followed
    missing = sorted(f"aws_cdk.{m}" for m in _reached() if not {f"aws_cdk.{m}", f"aws_cdk.{m}.*"} & followed)
    assert missing == [], f"add to the follow_imports = 'normal' override in pyproject.toml: {missing}"
    interfaces = _reached_interfaces()
    missing = sorted(f"aws_cdk.interfaces.{m}" for m in interfaces if f"aws_cdk.interfaces.{m}" not in followed)
    assert missing == [], f"add to the interfaces override in pyproject.toml: {missing}"


def test_only_the_interfaces_modules_the_code_reaches_are_followed() -> None:
    # The interfaces package imports all of its modules for type checkers; following them all cost 7-10 s.
    followed = {m for m in _followed() if m.startswith("aws_cdk.interfaces.")}
    assert "aws_cdk.interfaces.*" not in followed
    assert followed == {f"aws_cdk.interfaces.{m}" for m in _reached_interfaces()}
    assert len(followed) < len(list((CDK / "interfaces").glob("*/__init__.py"))) / 3


def test_the_rest_of_aws_cdk_is_skipped() -> None:
    overrides: list[dict[str, object]] = _mypy_config()["overrides"]  # type: ignore[assignment]
    assert {"module": ["aws_cdk.*"], "follow_imports": "skip"} in overrides
    services = {m for m in _followed() if m.startswith("aws_cdk") and not m.startswith("aws_cdk.interfaces")}
    assert len(services) < len(list(CDK.glob("*/__init__.py"))) / 3


def test_every_way_of_naming_a_module_counts(tmp_path: Path) -> None:
    source = "import aws_cdk as cdk\nfrom aws_cdk import aws_sns\nimport aws_cdk.aws_sqs\ncdk.aws_s3.Bucket\n"
    (tmp_path / "app.py").write_text(source)
    assert _our_cdk_modules(tmp_path, ["app.py"]) == {"aws_s3", "aws_sns", "aws_sqs"}


def test_reachable_follows_the_generated_imports() -> None:
    # aws_ec2's sources import aws_iam and aws_kms (a VPC's flow logs, an instance's role and volume keys).
    assert {"aws_ec2", "aws_iam", "aws_kms"} <= reachable({"aws_ec2"})
    assert "aws_quicksight" not in reachable({"aws_s3"})


def _moto_imports(root: Path = ROOT, sources: Sequence[str] = SOURCES) -> set[str]:
    """The moto modules the type-checked code imports, with their packages (`from moto.kms import models` imports
    moto, moto.kms and moto.kms.models)."""
    return set(_checkout_imports()[1]) if _is_checkout(root, sources) else _moto_imports_in(_trees(root, sources))


def _moto_imports_in(trees: Sequence[ast.Module]) -> set[str]:
    named: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named |= {alias.name for alias in node.names if alias.name.split(".")[0] == "moto"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "moto":
                module = str(node.module)
                named.add(module)
                package = MOTO.joinpath(*module.split(".")[1:])
                named |= {f"{module}.{a.name}" for a in node.names if (package / f"{a.name}.py").exists()}
                named |= {f"{module}.{a.name}" for a in node.names if (package / a.name / "__init__.py").exists()}
    return {".".join(name.split(".")[:i]) for name in named for i in range(1, name.count(".") + 2)}


def _is_followed(module: str, followed: set[str]) -> bool:
    """mypy's pattern match: `a.b.*` matches a.b and every module under it."""
    return any(module == p or (p.endswith(".*") and (module + ".").startswith(p[:-1])) for p in followed)


def test_mypy_follows_every_moto_module_the_code_imports() -> None:
    followed = {m for m in _followed() if m.split(".")[0] == "moto"}
    missing = sorted(m for m in _moto_imports() if not _is_followed(m, followed))
    assert missing == [], f"add to the moto follow_imports = 'normal' override in pyproject.toml: {missing}"
    overrides: list[dict[str, object]] = _mypy_config()["overrides"]  # type: ignore[assignment]
    assert {"module": ["moto.*"], "follow_imports": "skip"} in overrides
    # The point of the override: moto.backends (every service's models) and the services not named stay out.
    assert not any(_is_followed(m, followed) for m in ("moto.backends", "moto.ec2", "moto.ec2.models", "moto.s3"))


def test_every_way_of_importing_moto_counts(tmp_path: Path) -> None:
    source = "import moto\nfrom moto import mock_aws\nfrom moto.kms import models\nimport moto.core.models\n"
    (tmp_path / "app.py").write_text(source)
    found = _moto_imports(tmp_path, ["app.py"])
    assert found == {"moto", "moto.kms", "moto.kms.models", "moto.core", "moto.core.models"}
    assert _is_followed("moto.core.models", {"moto.core.*"}) and _is_followed("moto.core", {"moto.core.*"})
    assert not _is_followed("moto.corex", {"moto.core.*"}) and not _is_followed("moto.kms.models", {"moto.kms"})
