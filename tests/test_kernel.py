"""The jsii kernel's start options (mlstack.kernel): the preload reaches node, once, next to the caller's options."""

from __future__ import annotations

import os
import subprocess

from mlstack import kernel
from tests.synth import ROOT

NODE = ROOT / "node_modules" / ".bin" / "node"


def test_the_options_are_added_once_after_the_callers_options() -> None:
    once = kernel.node_options("--max-old-space-size=2048")
    assert once == f'--max-old-space-size=2048 --max-semi-space-size=64 --require "{kernel.PRELOAD}"'
    assert kernel.node_options(once) == once
    assert kernel.node_options("") == f'--max-semi-space-size=64 --require "{kernel.PRELOAD}"'


def test_a_callers_young_generation_size_wins() -> None:
    assert kernel.node_options("--max-semi-space-size=8") == f'--max-semi-space-size=8 --require "{kernel.PRELOAD}"'


def test_prepare_leaves_a_running_kernel_alone() -> None:
    environ: dict[str, str] = {}
    kernel.prepare(environ)  # aws_cdk is imported in the test session: its kernel started already
    assert environ == {}


def test_the_test_sessions_kernel_started_with_the_preload() -> None:
    # tests/conftest.py imports mlstack before anything imports aws_cdk, as app.py and synth_all do.
    assert str(kernel.PRELOAD) in os.environ["NODE_OPTIONS"]


def test_node_runs_the_preload_and_accepts_the_flag() -> None:
    env = {**os.environ, "NODE_OPTIONS": kernel.node_options("")}
    run = subprocess.run([str(NODE), "-e", "console.log('ok')"], env=env, capture_output=True, text=True, check=False)
    # A missing preload fails the start; a flag V8 does not know prints "unrecognized flag" and goes on.
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "ok", "")


def test_the_validation_worker_keeps_the_preload_and_a_callers_options_not_the_young_generation() -> None:
    options = kernel.node_options("--max-old-space-size=8192")
    assert kernel.SEMI_SPACE in options
    worker = kernel.worker_node_options(options)
    assert worker == f'--max-old-space-size=8192 --require "{kernel.PRELOAD}"'
    assert kernel.worker_node_options("") == ""
