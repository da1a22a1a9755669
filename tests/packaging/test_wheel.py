"""`pip install` of the built wheel works outside the checkout: `mlstack list`, `plan` and `validate`.

The wheel is built from a copy of what the build reads (so stale `build/` folders in the checkout cannot leak
into it), installed without dependencies into a fresh venv, and run from an empty folder. The fresh venv
borrows the test venv's installed dependencies through a `.pth` line; a plain path line does not process that
folder's own `.pth` files, so the checkout's editable mlstack stays invisible (asserted below).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlstack import resources
from mlstack.config import BLUEPRINTS_DIR, DEFAULT_BLUEPRINT
from tests.synth import ROOT

_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    cwd: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )


def _source_copy(dest: Path) -> Path:
    """What the build reads: the project files, the package, and every folder/file the package ships."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "mlstack", dest / "mlstack", symlinks=True, ignore=_IGNORE)
    for name in resources.SHIPPED_FOLDERS:
        shutil.copytree(ROOT / name, dest / name, ignore=_IGNORE)
    for name in resources.SHIPPED_FILES:
        shutil.copy2(ROOT / name, dest / name)
    return dest


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source = _source_copy(base / "src")
    dist = base / "dist"
    # Build isolation on: the build backend comes from [build-system] requires, as for any user's `pip install .`.
    _pip("wheel", "--no-deps", "-w", str(dist), str(source))
    (wheel,) = dist.glob("mlstack-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--no-deps", "--no-index", str(wheel))
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    cwd = base / "elsewhere"
    cwd.mkdir()
    yield Installed(wheel=wheel, venv=venv, cwd=cwd)


def test_installed_mlstack_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    done = installed.run("python", "-c", "import mlstack, pydantic; print(mlstack.__file__)")
    assert done.returncode == 0, done.stderr
    module = Path(done.stdout.strip())
    assert module.is_relative_to(installed.venv), module
    assert not module.is_relative_to(ROOT)


def test_wheel_ships_every_runtime_and_blueprint_file(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    for folder in resources.SHIPPED_FOLDERS:
        files = [
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
        assert files, folder
        missing = sorted(f for f in files if f"mlstack/_shipped/{f}" not in names)
        assert not missing, f"not in the wheel: {missing}"
    assert "mlstack/_shipped/cdk.json" in names
    assert "mlstack/validate_worker.cjs" in names  # the template-validation worker app.py starts
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_list_shows_the_shipped_blueprints(installed: Installed) -> None:
    done = installed.run("mlstack", "list")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert names == sorted(p.stem for p in BLUEPRINTS_DIR.glob("*.yaml"))
    assert "INVALID" not in done.stdout


def test_installed_plan_renders_the_training_job_from_the_packaged_template(installed: Installed) -> None:
    done = installed.run("mlstack", "plan", DEFAULT_BLUEPRINT, "--json")
    assert done.returncode == 0, done.stderr
    assert f'"blueprint": "{DEFAULT_BLUEPRINT}"' in done.stdout
    assert "TrainingRuntime" in done.stdout  # rendered from runtime/k8s/ inside the installed package


@pytest.mark.parametrize("name", ["inference-async", "eks-trn1-training"])
def test_installed_validate_finds_a_shipped_blueprint_by_name(installed: Installed, name: str) -> None:
    done = installed.run("mlstack", "validate", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {name}: blueprint {name!r}")


def test_installed_runtime_and_cdk_json_are_inside_the_venv(installed: Installed) -> None:
    code = (
        "import json\n"
        "from mlstack import resources\n"
        "print(resources.runtime_path('invoke', 'handler.py').is_file(), resources.runtime_path())\n"
        "print(len(json.loads(resources.cdk_json().read_text())['context']))\n"
    )
    done = installed.run("python", "-c", code)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    exists, where = first.split(" ", 1)
    assert exists == "True" and Path(where).is_relative_to(installed.venv)
    assert int(second) > 50  # the feature flags synth_all passes to every App
