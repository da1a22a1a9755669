"""tests/node_cache.py: the run's Node processes share one compile cache, which the project's Node writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import node_cache
from tests.template_checks.node_tools import NODE


def test_share_sets_a_new_directory_once_and_keeps_a_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_COMPILE_CACHE")
    node_cache.share()
    made = os.environ["NODE_COMPILE_CACHE"]
    assert Path(made).is_dir() and not any(Path(made).iterdir())
    node_cache.share()
    assert os.environ["NODE_COMPILE_CACHE"] == made
    monkeypatch.setenv("NODE_COMPILE_CACHE", "/somewhere/else")
    node_cache.share()
    assert os.environ["NODE_COMPILE_CACHE"] == "/somewhere/else"


def test_this_run_has_one_and_node_writes_it(tmp_path: Path) -> None:
    assert os.environ.get("NODE_COMPILE_CACHE"), "tests/conftest.py sets it before the jsii kernel starts"
    module = tmp_path / "m.cjs"
    module.write_text("module.exports = (n) => n * 2\nconsole.log(module.exports(21))\n")
    cache = tmp_path / "cache"
    env = {**os.environ, "NODE_COMPILE_CACHE": str(cache)}
    done = subprocess.run([str(NODE), str(module)], env=env, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "42"
    assert [p for p in cache.rglob("*") if p.is_file()], "Node wrote no compile cache: it ignores NODE_COMPILE_CACHE"
