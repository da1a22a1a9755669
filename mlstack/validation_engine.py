"""The validation engine's package, read out of the installed aws-cdk-lib for `mlstack.validation_workers`.

aws-cdk-lib bundles `@aws/cloudformation-validate` (the WebAssembly engine its CloudFormationValidatePlugin runs)
inside its jsii tarball, which the Python package ships. The worker needs that package as files: it is read out of
the tarball once per tarball (keyed by its SHA-256) into a private cache folder, never taken from anywhere else, so
the worker's engine is always the installed aws-cdk-lib's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlstack.errors import MlstackError

ENGINE_PREFIX = "package/node_modules/@aws/cloudformation-validate/"
"""Where aws-cdk-lib's tarball holds the engine package."""

ENGINE_OPTIONS: dict[str, Any] = {
    "detailLevel": "STANDARD",
    "exclude": {
        "ids": ["W3005", "W1020", "E1018", "W9002", "W9013", "W1103"],
        "services": [{"ruleId": "W3697", "service": "AWS::AutoScaling"}],
    },
    "severityLevel": "WARN",
}
"""What aws-cdk-lib's CloudFormationValidatePlugin passes to `validateTemplate` (core/lib/validation/
cloudformation-validate-plugin.js, 2.275.0: its IGNORE_RULES and the AutoScaling exclusion); the pseudo parameters
come per stack. tests/blueprints/test_validation.py reads them back out of the installed aws-cdk-lib."""


def cdk_tarball() -> Path:
    """aws-cdk-lib's jsii tarball inside the installed Python package."""
    spec = importlib.util.find_spec("aws_cdk._jsii")
    if spec is None or spec.origin is None:
        raise MlstackError("aws-cdk-lib's jsii package is not installed")
    found = sorted(Path(spec.origin).parent.glob("aws-cdk-lib@*.jsii.tgz"))
    if len(found) != 1:
        raise MlstackError(f"expected one aws-cdk-lib jsii tarball beside {spec.origin}, found {len(found)}")
    return found[0]


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """`$XDG_CACHE_HOME/mlstack`, or `~/.cache/mlstack`."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlstack"


ENGINE_MARKER = ".mlstack-complete"
"""Written last into an engine folder: the size of each file read out, as JSON. A folder whose files do not all have
those sizes (a copy cut short, or changed since) is read out again."""


def engine_package(tarball: Path, root: Path) -> Path:
    """The engine's package folder, read out of `tarball` into `root` the first time. The copy is made in a scratch
    folder and renamed into place once whole, so no process reads a copy another one is still writing, and an
    incomplete copy is first renamed out of the way (never deleted where another process could be reading it)."""
    digest = hashlib.sha256()
    with tarball.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    cache = root / "cloudformation-validate"
    target = cache / f"{tarball.name}-{digest.hexdigest()[:16]}"
    # Private, as jsii keeps its own package cache: the worker runs the JavaScript it finds below it.
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(cache)
    if _whole(target):
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:  # made 0700, whatever the umask
        staging = Path(scratch) / "engine"
        sizes: dict[str, int] = {}
        with tarfile.open(tarball) as archive:
            for member in archive:
                if not (member.isfile() and member.name.startswith(ENGINE_PREFIX)):
                    continue
                relative = Path(member.name[len(ENGINE_PREFIX) :])
                if relative.is_absolute() or ".." in relative.parts:
                    raise MlstackError(f"unexpected path in {tarball.name}: {member.name}")
                source = archive.extractfile(member)
                assert source is not None
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                (staging / relative).write_bytes(source.read())
                sizes[relative.as_posix()] = member.size
        if "package.json" not in sizes:
            raise MlstackError(f"{tarball.name} holds no {ENGINE_PREFIX}package.json")
        (staging / ENGINE_MARKER).write_text(json.dumps(sizes))
        if not _whole(target):  # again: another process may have put a whole copy there meanwhile
            if target.exists():
                with contextlib.suppress(OSError):
                    target.rename(Path(scratch) / "incomplete")  # removed with the scratch folder
            with contextlib.suppress(OSError):  # another process put its copy there first: use that one
                staging.rename(target)
    if not _whole(target):
        raise MlstackError(f"could not write the validation engine to {target}")
    return target


def _whole(folder: Path) -> bool:
    """Whether `folder` holds every file its marker lists, at the size listed."""
    try:
        sizes = json.loads((folder / ENGINE_MARKER).read_text())
        return isinstance(sizes, dict) and all((folder / name).stat().st_size == size for name, size in sizes.items())
    except (OSError, ValueError):
        return False


def _check_private(folder: Path) -> None:
    """Refuse a folder another user could write (under a shared XDG_CACHE_HOME): the code below it would run here."""
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise MlstackError(f"{folder} is not private to this user (owner {info.st_uid}, mode {info.st_mode:o})")
