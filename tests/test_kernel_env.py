"""The test processes' own jsii kernel runs without CDK's built-in template validation (tests/kernel_env.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from jsii._runtime import kernel

from mlstack.validation import add_template_validation
from tests import botocore_loader, conftest, kernel_env


def _kernel_environ() -> dict[bytes, bytes]:
    """The environment of this process's jsii kernel (the node process jsii started: jsii._runtime.kernel)."""
    pid = kernel.provider._process._process.pid  # type: ignore[attr-defined]
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.split(b"=", 1) for pair in pairs if b"=" in pair)


def test_the_kernel_skips_cdks_builtin_validation_and_the_children_do_not() -> None:
    assert _kernel_environ().get(b"CDK_VALIDATION") == b"false"
    # Only the kernel: this process's own environment (which the session synth, `cdk synth` and the own-app
    # subprocesses inherit) and the validation it registers explicitly are as a user has them.
    assert "CDK_VALIDATION" not in os.environ


def _seeded(outdir: Path) -> tuple[cdk.App, cdk.Stack]:
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "Seed")
    cdk.CfnResource(stack, "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1})
    return app, stack


def test_only_an_explicitly_registered_validation_runs(tmp_path: Path) -> None:
    _, stack = _seeded(tmp_path / "builtin")
    Template.from_stack(stack)  # the built-in plugin would write a report: skipped, nothing is written
    assert not (tmp_path / "builtin" / "validation-report.json").exists()
    app, _ = _seeded(tmp_path / "explicit")
    assert add_template_validation(app)
    app.synth()
    assert "NotAProperty" in (tmp_path / "explicit" / "validation-report.json").read_text()


class _Session:
    """What conftest's `pytest_sessionstart` reads of a pytest session: its plugins."""

    def __init__(self, plugins: set[str]) -> None:
        self.config = SimpleNamespace(pluginmanager=SimpleNamespace(has_plugin=lambda name: name in plugins))


def test_only_a_process_that_runs_tests_sets_up_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr(kernel_env, "start_kernel", lambda: started.append("kernel"))
    monkeypatch.setattr(botocore_loader, "share", lambda: started.append("loader"))
    # The xdist controller, then a worker (or a run without xdist).
    conftest.pytest_sessionstart(_Session({"dsession"}))  # type: ignore[arg-type]
    assert started == []
    conftest.pytest_sessionstart(_Session(set()))  # type: ignore[arg-type]
    assert started == ["kernel", "loader"]


def test_this_worker_is_not_taken_for_the_controller(request: pytest.FixtureRequest) -> None:
    assert not conftest._xdist_controller(request.session)
