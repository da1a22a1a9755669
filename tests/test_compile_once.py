"""`tests/compile_once.py`: two processes that import one uncached module at the same moment compile it once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import compile_once

ROOT = Path(__file__).resolve().parents[1]

# Each process says it is ready, waits for the `go` file, then imports `wanted`. Its compile is made slow (0.5 s)
# so that both processes look for the .pyc before either has written it: without a lock both compile, every time.
IMPORTER = textwrap.dedent(
    """
    import importlib.machinery, os, sys, time
    from pathlib import Path
    work = Path(sys.argv[1])
    sys.path.insert(0, str(work / "src"))
    from tests import compile_once
    if sys.argv[2] == "locked":
        compile_once.install()
        loader = compile_once.OnceLoader
    else:
        loader = importlib.machinery.SourceFileLoader
    standard = loader.source_to_code
    def source_to_code(self, data, path, **kwargs):
        with open(work / "compiles.log", "a") as log:
            log.write(f"{os.getpid()} {Path(path).name}\\n")
        time.sleep(0.5)
        return standard(self, data, path, **kwargs)
    loader.source_to_code = source_to_code
    (work / f"ready-{os.getpid()}").touch()
    while not (work / "go").exists():
        time.sleep(0.01)
    import wanted
    assert wanted.VALUE == 42
    """
)


def _import_twice(work: Path, mode: str) -> list[str]:
    (work / "src").mkdir(parents=True)
    (work / "src" / "wanted.py").write_text("VALUE = 42\n")
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / "pyc"), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    processes = [
        subprocess.Popen([sys.executable, "-c", IMPORTER, str(work), mode], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + 60
    while len(list(work.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (work / "go").touch()  # both are waiting, neither has looked for wanted.py yet
    for process in processes:
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    return (work / "compiles.log").read_text().splitlines()


def test_two_processes_compile_an_uncached_module_once(tmp_path: Path) -> None:
    compiles = _import_twice(tmp_path / "locked", "locked")
    assert [line.split()[1] for line in compiles] == ["wanted.py"]
    assert list((tmp_path / "locked" / "pyc").rglob("wanted*.pyc"))


def test_without_the_lock_both_compile(tmp_path: Path) -> None:
    """The control: the race above is real, so the first test fails if the lock does not hold."""
    assert len(_import_twice(tmp_path / "standard", "standard")) == 2


def test_a_cached_module_takes_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "cached.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pyc"))
    loader = compile_once.OnceLoader("cached", str(source))
    loader.get_code("cached")  # compiles and writes the .pyc, under a lock
    locks = set((tmp_path / "pyc" / ".compile-locks").iterdir())
    for lock in locks:
        lock.unlink()
    assert loader.get_code("cached") is not None
    assert not any((tmp_path / "pyc" / ".compile-locks").iterdir()), "a cached module took a lock"


def test_install_replaces_the_file_finder_once() -> None:
    compile_once.install()
    compile_once.install()
    hooks = [hook for hook in sys.path_hooks if getattr(hook, "mlstack_compile_once", False)]
    assert len(hooks) == 1
    assert not [h for h in sys.path_hooks if compile_once._is_file_finder_hook(h) and h not in hooks]


def test_an_unusable_lock_directory_still_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "plain.py"
    source.write_text("VALUE = 2\n")
    (tmp_path / "pyc").mkdir()
    (tmp_path / "pyc" / ".compile-locks").write_text("a file where the directory would be\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pyc"))
    code = compile_once.OnceLoader("plain", str(source)).get_code("plain")
    assert code is not None
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace["VALUE"] == 2
