"""Run a function right after a module is imported, without importing it earlier.

`call_after_import(name, then)`: `then(module)` runs once `name` has been executed, each time it is (a reload
too), or at once if it is already imported. The finder stays in `sys.meta_path` (it answers only for `name`, and
only by asking the finders after it, with a copy of their spec), so a lookup that does not import
(`importlib.util.find_spec`) uses nothing up, and the list changes only when the finder is added. An exception in
`then` becomes a warning: the module stays imported as it is.
"""

from __future__ import annotations

import copy
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec


def _run(then: Callable[[ModuleType], object], module: ModuleType) -> None:
    try:
        then(module)
    except Exception as err:  # the module itself imported fine: it stays usable
        warnings.warn(f"after importing {module.__name__}: {err!r}", RuntimeWarning, stacklevel=2)


class _ThenLoader:
    """A module's own loader, with `then(module)` once the module has run."""

    def __init__(self, loader: Any, then: Callable[[ModuleType], object]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        module: ModuleType | None = create(spec) if create is not None else None
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _run(self._then, module)

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface (resources, source)
        # Only once set up: copy and pickle probe attributes on an instance made without __init__.
        if name.startswith("__") or "_loader" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_loader"], name)


class _AfterImport:
    """A `sys.meta_path` finder for `name` only: it finds the module through the finders after it and wraps the
    loader."""

    def __init__(self, name: str, then: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.then = then
        # The finders it asks could ask sys.meta_path again: it does not answer itself then. Per thread: a lookup in
        # another thread at the same moment must not make the hook step aside for the real import.
        self._searching = threading.local()

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.name or getattr(self._searching, "now", False):
            return None
        finders = list(sys.meta_path)
        after = finders[finders.index(self) + 1 :] if self in finders else finders
        self._searching.now = True
        try:
            for finder in after:
                find = getattr(finder, "find_spec", None)
                found: ModuleSpec | None = find(fullname, path, target) if find is not None else None
                if found is not None:
                    if found.loader is None:
                        return found
                    # A copy: a finder may hand out the spec it keeps, whose loader must not be wrapped again on
                    # each lookup. A Loader by protocol (create_module, exec_module), not by class: importlib.abc
                    # costs imports.
                    spec = copy.copy(found)
                    spec.loader = _ThenLoader(found.loader, self.then)  # type: ignore[assignment]
                    return spec
        finally:
            self._searching.now = False
        return None


def call_after_import(name: str, then: Callable[[ModuleType], object]) -> None:
    """`then(module)` once `name` is imported: now if it is, else when it is (and on each reload). Once per
    `then`: a second call with the same function and name adds nothing."""
    for finder in sys.meta_path:
        if isinstance(finder, _AfterImport) and finder.name == name and finder.then == then:
            break
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))
    if name in sys.modules:
        _run(then, sys.modules[name])
