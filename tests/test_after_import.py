"""mlstack.after_import: a function run right after a module is imported, and on each reload, without importing it
earlier; a lookup uses nothing up; a failing function leaves the module imported."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import pytest

from mlstack.after_import import _AfterImport, _ThenLoader, call_after_import

NAME = "late_module_for_after_import"


@pytest.fixture
def late(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module `NAME` not imported yet; sys.path, sys.meta_path and sys.modules as they were afterwards."""
    source = tmp_path / f"{NAME}.py"
    source.write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    try:
        yield source
    finally:
        sys.modules.pop(NAME, None)


def _import() -> ModuleType:
    return importlib.import_module(NAME)


@pytest.mark.usefixtures("late")
def test_it_runs_right_after_the_import_not_before() -> None:
    seen: list[int] = []
    call_after_import(NAME, lambda module: seen.append(module.VALUE))
    assert seen == []
    assert NAME not in sys.modules
    _import()
    assert seen == [42]


@pytest.mark.usefixtures("late")
def test_a_lookup_without_import_uses_nothing_up() -> None:
    seen: list[str] = []
    call_after_import(NAME, lambda module: seen.append(module.__name__))
    assert importlib.util.find_spec(NAME) is not None
    assert seen == []
    _import()
    assert seen == [NAME]


def test_it_runs_again_on_reload(late: Path) -> None:
    seen: list[int] = []
    call_after_import(NAME, lambda module: seen.append(module.VALUE))
    module = _import()
    late.write_text("VALUE = 4300\n")  # another size: a bytecode cache of the first is not taken for it
    importlib.invalidate_caches()
    importlib.reload(module)
    assert seen == [42, 4300]


@pytest.mark.usefixtures("late")
def test_an_imported_module_gets_it_at_once_and_it_is_installed_once() -> None:
    _import()
    seen: list[int] = []

    def then(module: ModuleType) -> None:
        seen.append(module.VALUE)

    call_after_import(NAME, then)
    call_after_import(NAME, then)
    assert seen == [42, 42]  # each call runs it for the imported module
    assert len([f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == NAME]) == 1


@pytest.mark.usefixtures("late")
def test_a_failing_function_warns_and_leaves_the_module_imported() -> None:
    def then(module: ModuleType) -> None:
        raise ValueError("no")

    call_after_import(NAME, then)
    with pytest.warns(RuntimeWarning, match=f"after importing {NAME}: ValueError"):
        module = _import()
    assert module.VALUE == 42
    assert sys.modules[NAME] is module


@pytest.mark.usefixtures("late")
def test_other_modules_are_left_to_the_other_finders() -> None:
    finder = _AfterImport(NAME, lambda module: None)
    assert finder.find_spec("json", None) is None
    spec = finder.find_spec(NAME, None)
    assert spec is not None and spec.origin is not None and spec.origin.endswith(f"{NAME}.py")


class _KeepingFinder:
    """A finder that hands out the one spec it keeps (as some do): the hook must not wrap its loader each time."""

    def __init__(self, spec: ModuleSpec) -> None:
        self.spec = spec

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        return self.spec if fullname == NAME else None


@pytest.mark.usefixtures("late")
def test_a_kept_spec_is_not_wrapped_again_by_each_lookup() -> None:
    kept = importlib.util.find_spec(NAME)
    assert kept is not None and kept.loader is not None
    loader = kept.loader
    sys.meta_path.insert(0, _KeepingFinder(kept))
    seen: list[int] = []
    call_after_import(NAME, lambda module: seen.append(module.VALUE))
    for _ in range(3):
        spec = importlib.util.find_spec(NAME)
        assert spec is not None and isinstance(spec.loader, _ThenLoader)
    assert kept.loader is loader
    _import()
    assert seen == [42]


@pytest.mark.usefixtures("late")
def test_the_wrapped_loader_copies_and_answers_for_the_loader() -> None:
    call_after_import(NAME, lambda module: None)
    module = _import()
    assert module.__spec__ is not None
    loader = module.__spec__.loader
    assert isinstance(loader, _ThenLoader)
    assert loader.get_source(NAME) == "VALUE = 42\n"  # the loader's own interface, through the wrapper
    assert copy.copy(loader).get_source(NAME) == "VALUE = 42\n"
