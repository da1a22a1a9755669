"""Each module compiled once per test run, not once per process.

The pytest-xdist workers import the same modules at the same moment (each collects every test module). With no
bytecode cache yet (a fresh clone: `.pycache/` is git-ignored), every worker compiled every module itself (about
3,000: aws_cdk's service modules, moto, sympy through cfn-lint, the tests), because each looked for the `.pyc`
before the other had written it: collecting took 30 s of CPU per worker instead of 9.

`install()` puts a source loader in front that, only when a module's `.pyc` is missing, takes a lock for that
module (an `fcntl.flock` on one of `STRIPES` files beside the cache) before it compiles: a second process that
wants the same module waits for the first one's write, then loads its `.pyc` instead of compiling again (the
standard loader checks the cache again once it holds the lock). A cached module takes no lock, and no module's
loader imports another while it holds one, so a lock never waits on a lock.
"""

from __future__ import annotations

import fcntl
import importlib.machinery as machinery
import os
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import cache_from_source
from pathlib import Path
from types import CodeType

STRIPES = 64
"""Lock files: two modules share one with probability 1/64, and then only wait for each other's compile."""


def lock_dir() -> Path:
    return Path(sys.pycache_prefix or tempfile.gettempdir()) / ".compile-locks"


@contextmanager
def _locked(source: str) -> Iterator[None]:
    directory = lock_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / f"{zlib.crc32(source.encode()) % STRIPES}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # e.g. another user's lock directory in a shared temp dir: compile as the standard loader does
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


class OnceLoader(machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> CodeType | None:
        if sys.dont_write_bytecode or Path(cache_from_source(self.path)).exists():
            return super().get_code(fullname)
        with _locked(self.path):
            return super().get_code(fullname)


def _is_file_finder_hook(hook: object) -> bool:
    return getattr(hook, "__qualname__", "").startswith("FileFinder.path_hook")


def install() -> None:
    """Modules found on `sys.path` from now on load through `OnceLoader` (those already imported are unaffected)."""
    if any(getattr(hook, "mlstack_compile_once", False) for hook in sys.path_hooks):
        return
    hook = machinery.FileFinder.path_hook(
        (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (OnceLoader, machinery.SOURCE_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
    )
    hook.mlstack_compile_once = True  # type: ignore[attr-defined]
    sys.path_hooks[:] = [hook if _is_file_finder_hook(h) else h for h in sys.path_hooks]
    sys.path_importer_cache.clear()  # finders made before now would keep the standard loader
