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

The preload also runs the kernel in one process instead of two: jsii starts `node bin/jsii-runtime.js`, which only
relays each request and response to a second node process running the kernel (`lib/program.js`). The relay sat on
every round trip of a synth (about 11k for all blueprints, 1.5 s of CPU time and as much wall time); the preload
has the first process load the kernel itself, with the same protocol on its stdin, stdout and stderr
(`kernel_preload.cjs` says how, and when it leaves the relay as shipped).

`prepare()` runs when `mlstack` is imported (`mlstack/__init__.py`). A kernel that is already running (aws_cdk
imported before mlstack) keeps its flags: nothing breaks, it is only slower. NODE_OPTIONS set by the caller is
kept, with the preload added once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PRELOAD = Path(__file__).resolve().with_name("kernel_preload.cjs")


SEMI_SPACE = "--max-semi-space-size=64"

PRESERVE_SYMLINKS = "--preserve-symlinks"
"""The module resolution jsii gives its kernel's process (the relay starts it with this flag): the kernel links each
package it loads into its working folder, and a package finds its peers (aws-cdk-lib finds constructs) through
those links. The kernel links with symbolic links only when the flag is on its command line, and otherwise hard-links
every file of the package (tens of thousands for aws-cdk-lib, about 0.4 s of CPU per start); the preload puts the
flag there for jsii to see when node runs with it. Other node programs mlstack starts (the CDK CLI, the validation
worker) resolve the same with it: their dependencies are installed by npm, without symbolic links."""


def node_options(current: str) -> str:
    """`current` NODE_OPTIONS with the preload required once (quoted: node parses the value like a shell), the
    young generation's size unless `current` sets one, and symbolic links preserved."""
    options = [current] if current else []
    if "--max-semi-space-size" not in current:
        options.append(SEMI_SPACE)
    if PRESERVE_SYMLINKS not in current.split():
        options.append(PRESERVE_SYMLINKS)
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
