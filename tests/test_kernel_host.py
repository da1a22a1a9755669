"""The jsii kernel in one node process (mlstack/kernel_preload.cjs): jsii's relay process loads the kernel itself,
with the protocol jsii's Python side expects on stdin, stdout and stderr; anything unexpected leaves the relay as
shipped."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from mlstack import kernel
from tests.synth import ROOT

NODE = ROOT / "node_modules" / ".bin" / "node"

RELAY = 'process.stdout.write("the relay ran\\n");\n'

# A stand-in for jsii's lib/program.js: the marker the preload looks for, one request read from descriptor 3 and its
# response written there, console output on both streams, and a child process given process.stdout as its output
# (as CDK's asset bundling does with process.stderr).
PROGRAM = """// new SyncStdio({errorFD: 2, readFD:3,writeFD:3})
const fs = require("fs");
const buffer = Buffer.alloc(64);
const read = fs.readSync(3, buffer, 0, buffer.length, null);
console.log("to stdout");
console.error("to stderr");
require("child_process").spawnSync("sh", ["-c", "echo from a child"], { stdio: ["ignore", process.stdout, "inherit"] });
const links = process.execArgv.includes("--preserve-symlinks") ? "symbolic links" : "hard links";
fs.writeSync(3, Buffer.from(`reply to ${buffer.toString("utf8", 0, read).trim()} (${links})\n`));
"""


def _layout(tmp_path: Path, program: str | None = PROGRAM) -> Path:
    """jsii's layout of its runtime: bin/jsii-runtime.js with lib/program.js beside it; the entry point's path."""
    entry = tmp_path / "bin" / "jsii-runtime.js"
    entry.parent.mkdir()
    entry.write_text(RELAY)
    if program is not None:
        (tmp_path / "lib").mkdir()
        (tmp_path / "lib" / "program.js").write_text(program)
    return entry


def _run(entry: Path, node_options: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NODE_OPTIONS": kernel.node_options("") if node_options is None else node_options}
    env.pop("NODE_PRESERVE_SYMLINKS", None)
    return subprocess.run(
        [str(NODE), str(entry)], input="request\n", env=env, capture_output=True, text=True, check=False, timeout=60
    )


def _relayed(stderr: str) -> list[tuple[str, str]]:
    """stderr's lines in jsii's relay format as (stream, text); other lines as ("raw", line)."""
    lines = []
    for line in stderr.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            lines.append(("raw", line))
            continue
        ((stream, data),) = message.items()
        lines.append((stream, base64.b64decode(data).decode()))
    return lines


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the preload checks descriptor 3 in /proc (Linux)")
def test_the_kernel_runs_in_the_relays_process_with_the_relays_protocol(tmp_path: Path) -> None:
    run = _run(_layout(tmp_path))
    assert run.returncode == 0, run.stderr
    # stdout carries only the protocol: the response, nothing of the console, the child or the relay's own code.
    # The kernel links packages as the relay's child would (jsii reads the flag from the command line).
    assert run.stdout == "reply to request (symbolic links)\n"
    assert _relayed(run.stderr) == [
        ("stdout", "to stdout\n"),
        ("stderr", "to stderr\n"),
        ("raw", "from a child"),  # a child's output lands on descriptor 2, as jsii's Python side prints it
    ]


@pytest.mark.parametrize(
    "program",
    [
        pytest.param("// a kernel that talks on other descriptors\n", id="no-descriptor-3-marker"),
        pytest.param(None, id="no-program-beside-the-relay"),
    ],
)
def test_anything_unexpected_leaves_the_relay_as_shipped(tmp_path: Path, program: str | None) -> None:
    run = _run(_layout(tmp_path, program))
    assert (run.returncode, run.stdout, run.stderr) == (0, "the relay ran\n", "")


def test_without_preserved_symbolic_links_the_relay_runs(tmp_path: Path) -> None:
    # The kernel in this process would resolve modules unlike the relay's child (which gets --preserve-symlinks).
    run = _run(_layout(tmp_path), node_options=f'--require "{kernel.PRELOAD}"')
    assert (run.returncode, run.stdout, run.stderr) == (0, "the relay ran\n", "")


def test_another_entry_point_keeps_its_own_streams(tmp_path: Path) -> None:
    entry = tmp_path / "main.js"  # not bin/jsii-runtime.js, though lib/program.js is there
    entry.write_text(RELAY)
    _layout(tmp_path)
    run = _run(entry)
    assert (run.returncode, run.stdout, run.stderr) == (0, "the relay ran\n", "")


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`: pid -> command line."""
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children[int(entry.name)] = cmdline
    return children


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the process tree from /proc (Linux)")
def test_this_test_processs_kernel_is_one_node_process() -> None:
    import aws_cdk as cdk  # noqa: F401  (the kernel is running: conftest started it)

    kernels = {pid: cmd for pid, cmd in _children(os.getpid()).items() if "bin/jsii-runtime.js" in cmd}
    assert len(kernels) == 1, kernels
    (pid,) = kernels
    assert not [cmd for cmd in _children(pid).values() if "program.js" in cmd]
