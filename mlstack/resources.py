"""Where mlstack's shipped files are: runtime code, Kubernetes templates, blueprints, catalog data, cdk.json.

This module is the only place that knows. Everything else asks it, with one call:

    from mlstack import resources

    handler_dir = resources.runtime_path("invoke")                       # runtime/invoke/ (a folder)
    template = resources.runtime_path("k8s", "torch-efa-runtime.yaml")   # runtime/k8s/... (a file)
    blueprints = resources.blueprints_dir()                              # blueprints/
    text = resources.catalog_text("instances.yaml")                      # mlstack/catalog/data/instances.yaml

New runtime code goes anywhere under the repository's top-level `runtime/` and new blueprints into
`blueprints/`; both folders are shipped whole, so nothing here or in `pyproject.toml` changes when a layer adds
files. Asset code for the CDK (`Code.from_asset`) needs a folder on disk: `runtime_path` returns a real,
resolved `Path`.

How the files reach an installed package: `runtime/`, `blueprints/` and `cdk.json` stay at the top of the
repository, where forks edit them, and `mlstack/_shipped/` holds relative symbolic links to them
(`mlstack/_shipped/runtime -> ../../runtime`, ...). `pyproject.toml` declares `_shipped/**` as package data;
building a wheel copies the files behind the links, so `pip install .` (editable or not) and a wheel carry
them, and importlib.resources finds them under the installed `mlstack` package. In a checkout (running from
it, or an editable install) the links lead to the checkout's own folders, so a blueprint a user adds to
`blueprints/` is found by name at once.

Git on Windows checks symbolic links out as small text files unless `core.symlinks` is on; `_shipped` then
names the problem instead of failing later with a missing file.
"""

from __future__ import annotations

import functools
from importlib import resources as _importlib_resources
from pathlib import Path

SHIPPED_FOLDERS = ("runtime", "blueprints")
SHIPPED_FILES = ("cdk.json",)
"""What `mlstack/_shipped/` links to: each name is the same path at the repository root."""


@functools.cache
def _shipped(name: str) -> Path:
    """The resolved path of one entry of `mlstack/_shipped/` (a link target in a checkout, a copy when installed)."""
    if name not in (*SHIPPED_FOLDERS, *SHIPPED_FILES):
        raise KeyError(f"{name!r} is not shipped; link it under mlstack/_shipped/ and list it here")
    entry = _importlib_resources.files("mlstack").joinpath("_shipped", name)
    if not isinstance(entry, Path):
        raise RuntimeError(f"mlstack/_shipped/{name}: mlstack must be installed as files on disk, not in a zip archive")
    path = entry.resolve()
    if not (path.is_dir() if name in SHIPPED_FOLDERS else path.is_file()):
        raise RuntimeError(
            f"{entry}: shipped {name!r} is missing; in a git checkout it is a symbolic link to ../../{name} "
            "(on Windows clone with `git clone -c core.symlinks=true`)"
        )
    return path


def runtime_path(*parts: str) -> Path:
    """A file or folder under the repository's `runtime/` (runtime code and Kubernetes templates)."""
    return _shipped("runtime").joinpath(*parts)


def blueprints_dir() -> Path:
    """The shipped blueprints folder (`blueprints/`; in a checkout, the checkout's own folder)."""
    return _shipped("blueprints")


def cdk_json() -> Path:
    """The project's `cdk.json` (its feature flags are the context every synth uses)."""
    return _shipped("cdk.json")


def catalog_text(name: str) -> str:
    """The text of one catalog data file (`mlstack/catalog/data/<name>`)."""
    return _importlib_resources.files("mlstack.catalog").joinpath("data", name).read_text(encoding="utf-8")
