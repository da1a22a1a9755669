"""How the jsii kernel starts: the node process every `aws_cdk` call goes to, started by the first `import aws_cdk`.

CDK validates every template at synth with a WebAssembly engine (aws-cdk-lib's built-in CloudFormation
validation, `@aws/cloudformation-validate`, a 9 MB module). V8 runs WebAssembly first as its baseline compiler
(Liftoff) emits it and then recompiles the hot functions with its optimizing compiler (TurboFan) on other
threads; in a synth that runs for seconds the recompilation is never paid back: with `--liftoff-only`, validating
the shipped blueprints' templates takes about half the CPU time (the reports are the same: it changes only which
compiler V8 uses). Node takes V8 flags only on its command line, and jsii starts node itself, but NODE_OPTIONS
accepts `--require`: `kernel_preload.cjs` sets the flag before any module is compiled.

The kernel also gets a larger young generation (`--max-semi-space-size=64`, MB; V8's default on 64-bit is 16, and
NODE_OPTIONS accepts the flag): a synth allocates hundreds of MB of short-lived objects, and with the default
size V8 scavenges so often that it spent about 5% more of the kernel's CPU time (measured over the all-blueprint
synth). A caller's own `--max-semi-space-size` wins.

The kernel is also started without jsii's relay process between it and Python (`kernel_start.py`).

`prepare()` runs when `mlstack` is imported (`mlstack/__init__.py`). A kernel that is already running (aws_cdk
imported before mlstack) keeps its flags: nothing breaks, it is only slower. NODE_OPTIONS set by the caller is
kept, with the preload added once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

from mlstack.kernel_start import install as install_direct_start

PRELOAD = Path(__file__).resolve().with_name("kernel_preload.cjs")


SEMI_SPACE = "--max-semi-space-size=64"


def node_options(current: str) -> str:
    """`current` NODE_OPTIONS with the preload required once (quoted: node parses the value like a shell) and the
    young generation's size unless `current` sets one."""
    options = [current] if current else []
    if "--max-semi-space-size" not in current:
        options.append(SEMI_SPACE)
    if str(PRELOAD) not in current:
        options.append(f'--require "{PRELOAD}"')
    return " ".join(options)


def worker_node_options(current: str) -> str:
    """`current` NODE_OPTIONS for a Node process of mlstack's own beside the kernel (the template-validation worker):
    the preload kept (Liftoff only), the kernel's larger young generation taken out again (it made the worker's
    validation about 15% slower in CPU: a small heap that is mostly the engine's, scavenged rarely anyway)."""
    return " ".join(part for part in current.split(" ") if part and part != SEMI_SPACE)


def prepare(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set the kernel's start options in `environ`, for the kernel this process starts (and its children's)."""
    if "aws_cdk" in sys.modules:  # the kernel already started: a flag now would not reach it
        return
    environ["NODE_OPTIONS"] = node_options(environ.get("NODE_OPTIONS", ""))
    if environ is os.environ:  # the start reads this process's environment
        install_direct_start()
