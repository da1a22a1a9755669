"""The jsii kernel started as Python's own child, without jsii's relay process (mlstack/kernel_start.py): the
protocol on descriptor 3, the kernel's output on this process's streams, the relay's arguments, each fallback to
the relay as shipped, and a kernel that does not outlive its Python."""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsii._kernel.providers import process as provider

from mlstack import kernel, kernel_start
from tests.synth import ROOT

PYTHON = sys.executable

# A stand-in for jsii's lib/program.js: the channel marker the start looks for (in this comment), the handshake and
# one answer on descriptor 3, console output on both streams, and a child given the kernel's stdio (as asset
# bundling does): its output must reach this process's streams, never the protocol, and its stdin must be empty.
# After the exit request it reads on, as a kernel interrupted inside a callback does, and exits 0 only at end of
# file. FAKE_KERNEL_PAUSE_MS delays the handshake; FAKE_KERNEL_FLOOD writes that many bytes to stdout first,
# FAKE_KERNEL_TEXT that text; FAKE_KERNEL_ORPHAN starts a detached child holding stdout and stderr (its pid answered);
# FAKE_KERNEL_DIE has it exit 5 after its answer, with last words on stderr.
PROGRAM = r"""// new SyncStdio({errorFD: 2, readFD:3,writeFD:3})
const fs = require("fs");
function readLine() {
  let line = "";
  const buffer = Buffer.alloc(1);
  while (fs.readSync(3, buffer, 0, 1, null) === 1 && buffer[0] !== 10) line += buffer.toString();
  return line;
}
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(process.env.FAKE_KERNEL_PAUSE_MS || 0));
fs.writeSync(3, JSON.stringify({ hello: "@jsii/runtime@0.0.0" }) + "\n");
const request = readLine();
if (process.env.FAKE_KERNEL_FLOOD) fs.writeSync(1, "x".repeat(Number(process.env.FAKE_KERNEL_FLOOD)) + "\n");
if (process.env.FAKE_KERNEL_TEXT) fs.writeSync(1, process.env.FAKE_KERNEL_TEXT + "\n");
let orphan = null;
if (process.env.FAKE_KERNEL_ORPHAN) {
  const child = require("child_process").spawn("sleep", ["60"], { stdio: "inherit", detached: true });
  child.unref();
  orphan = child.pid;
}
console.log("to stdout");
console.error("to stderr");
require("child_process").spawnSync("sh", ["-c", "echo from a child; cat; echo stdin ended"], { stdio: "inherit" });
const answer = {
  request,
  argv: process.execArgv,
  agent: process.env.JSII_AGENT,
  stdinIsDevNull: fs.fstatSync(0).rdev === fs.statSync("/dev/null").rdev,
  oldestLeftForChildren: process.env.MLSTACK_NODE_OLDEST ?? null,
  orphan,
};
fs.writeSync(3, JSON.stringify(answer) + "\n");
if (process.env.FAKE_KERNEL_DIE) {
  console.error("last words");
  process.exit(5);
}
const exit = readLine();
process.exit(exit === '{"exit":0}' && fs.readSync(3, Buffer.alloc(1), 0, 1, null) === 0 ? 0 : 3);
"""


def _layout(tmp_path: Path, program: str | None = PROGRAM) -> Path:
    """jsii's runtime layout: bin/jsii-runtime.js with lib/program.js beside it; the entry point's path."""
    entry = tmp_path / "bin" / "jsii-runtime.js"
    entry.parent.mkdir()
    entry.write_text("throw new Error('the relay ran');\n")
    if program is not None:
        (tmp_path / "lib").mkdir()
        (tmp_path / "lib" / "program.js").write_text(program)
    return entry


class _Process(provider._NodeProcess):
    """jsii's own process object, with its runtime files taken from `entry` instead of its package."""

    def __init__(self, entry: Path) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.entry = entry

    def _jsii_runtime(self) -> str:
        return str(self.entry)

    def stop(self) -> None:  # jsii's __del__ stops it; one the test did not start has nothing to stop
        if hasattr(self, "_process"):
            super().stop()


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """No caller's choice in the environment that would keep the relay."""
    for name in (kernel_start.KEEP_RELAY, "JSII_RUNTIME", "JSII_NODE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def started(tmp_path: Path, direct: None) -> Iterator[Callable[..., _Process]]:
    """Start a fake kernel directly (`started(program=...)`); any the test leaves running (an assertion failed
    first) is ended afterwards, not at the session's exit."""
    processes: list[_Process] = []

    def start(program: str | None = PROGRAM) -> _Process:
        process = _Process(_layout(tmp_path, program))
        processes.append(process)
        kernel_start.start(process, _relay_started)
        return process

    yield start
    for process in processes:
        kernel: Any = getattr(process, "_process", None)
        if kernel is not None and kernel._popen.poll() is None:
            kernel.terminate()
        process.stop()


def _relay_started(process: object) -> None:
    pytest.fail("the relay was started")


def _exchange(process: _Process) -> tuple[dict[str, Any], int]:
    """One request and its answer on the protocol socket, then jsii's stop(); the answer and the exit code."""
    channel: Any = process._process
    channel.stdin.write(b"request\n")
    channel.stdin.flush()
    # A kernel that blocks (on a full output pipe) would leave readline waiting for good: wait a bounded time.
    ready, _, _ = select.select([channel.stdout], [], [], 60)
    assert ready, "no answer from the kernel"
    answer = json.loads(channel.stdout.readline())
    # jsii's stop() sends {"exit":0} and closes stdin: the program exits 0 only if it then reads end of file
    # (without it, stop() waits 5 s and terminates it: -15).
    process.stop()
    return answer, channel.wait()


def test_the_kernel_talks_on_descriptor_3_and_its_output_reaches_this_processs_streams(
    started: Callable[..., _Process], capfd: pytest.CaptureFixture[str]
) -> None:
    answer, code = _exchange(started())  # started: the handshake was read from descriptor 3
    assert code == 0
    assert answer["request"] == "request"
    # The relay's arguments (jsii's heap size, and --preserve-symlinks: jsii links cached packages, aws/jsii#4181).
    assert answer["argv"] == ["--max-old-space-size=4069", "--preserve-symlinks"]
    assert answer["agent"].startswith("Python/")
    assert answer["stdinIsDevNull"] is True
    assert answer["oldestLeftForChildren"] is None  # the preload read it and took it out
    out, err = capfd.readouterr()
    # As text, in order per stream; nothing of it went to the protocol (the answer above parsed). No notice: this
    # Node is one mlstack is tested on.
    assert out == "to stdout\nfrom a child\nstdin ended\n"
    assert err == "to stderr\n"


def test_a_node_older_than_mlstack_is_tested_on_gets_a_notice(
    started: Callable[..., _Process], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In place of the relay's end-of-life notice; this test's Node stands for an old one by raising the oldest.
    assert str(kernel.PRELOAD) in os.environ["NODE_OPTIONS"]  # the preload says it (mlstack.kernel set it)
    monkeypatch.setattr(kernel_start, "NODE_OLDEST", 999)
    _, code = _exchange(started())
    assert code == 0
    (notice,) = [line for line in capfd.readouterr().err.splitlines() if line.startswith("mlstack: Node")]
    assert "is older than Node 999, the oldest mlstack is tested on" in notice


def test_a_default_socket_timeout_leaves_the_channel_blocking(
    started: Callable[..., _Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    # socket.setdefaulttimeout() makes new sockets non-blocking: the kernel's synchronous reads would fail with
    # EAGAIN, and jsii's reads here would time out during a call longer than the timeout (here the handshake).
    monkeypatch.setenv("FAKE_KERNEL_PAUSE_MS", "300")
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(0.05)
    try:
        process = started()
    finally:
        socket.setdefaulttimeout(previous)
    answer, code = _exchange(process)
    assert (answer["request"], code) == ("request", 0)


class _Unwritable:
    def write(self, data: object) -> int:
        raise OSError("closed")

    def flush(self) -> None:
        raise OSError("closed")


def test_output_that_cannot_be_written_is_dropped_and_the_pipes_drained(
    started: Callable[..., _Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    # More than a pipe holds (64 KiB on Linux): a kernel whose stdout is not drained blocks before it answers.
    monkeypatch.setenv("FAKE_KERNEL_FLOOD", str(1 << 20))
    monkeypatch.setattr(sys, "stdout", _Unwritable())
    answer, code = _exchange(started())
    assert (answer["request"], code) == ("request", 0)


def test_a_text_only_stream_gets_whole_characters(
    started: Callable[..., _Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 80,001 bytes of two-byte characters after one of one byte: reads of the pipe end inside a character.
    monkeypatch.setenv("FAKE_KERNEL_TEXT", "x" + "\u00e9" * 40000)
    text = io.StringIO()  # no .buffer
    monkeypatch.setattr(sys, "stdout", text)
    _, code = _exchange(started())
    assert code == 0
    assert text.getvalue() == "x" + "\u00e9" * 40000 + "\nto stdout\nfrom a child\nstdin ended\n"


def test_a_silenced_major_version_gets_no_notice(
    started: Callable[..., _Process], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    major = subprocess.run(["node", "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True)
    monkeypatch.setenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", f"18, {major.stdout.strip()}")
    monkeypatch.setattr(kernel_start, "NODE_OLDEST", 999)
    _exchange(started())
    assert "mlstack: Node" not in capfd.readouterr().err


def test_a_kernel_that_died_is_stopped_and_its_last_words_shown(
    started: Callable[..., _Process], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KERNEL_DIE", "1")
    process = started()
    channel: Any = process._process
    channel.stdin.write(b"request\n")
    channel.stdin.flush()
    json.loads(channel.stdout.readline())
    assert channel.wait() == 5  # gone before jsii's stop(), whose exit request then meets a closed socket
    process.stop()  # no BrokenPipeError out of it
    assert not process.sink_thread.is_alive()
    assert "last words" in capfd.readouterr().err


def test_a_kernel_that_cannot_talk_on_descriptor_3_gives_way_to_the_relay(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, direct: None
) -> None:
    # A `node` wrapper that does not pass descriptor 3 on (as a sandbox or shim may not).
    wrapper = tmp_path / "node-without-3"
    wrapper.write_text('#!/bin/sh\nexec node "$@" 3<&-\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("JSII_NODE", str(wrapper))
    (tmp_path / "runtime").mkdir()
    process = _Process(_layout(tmp_path / "runtime"))
    relay: list[Any] = []
    kernel_start.start(process, relay.append)
    assert relay == [process]
    assert not hasattr(process, "_process")
    err = capfd.readouterr().err
    assert "writeSync" in err  # the kernel's own error (its handshake's write to descriptor 3 failed), shown
    assert "mlstack: the jsii kernel did not start directly" in err


def test_a_child_holding_the_kernels_output_does_not_keep_the_sink(
    started: Callable[..., _Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A detached child of the kernel keeps its stdout and stderr open after the kernel exits: the sink stops when
    # the kernel has ended instead of waiting for their end of file (a daemon thread writing at exit can abort the
    # interpreter; jsii's stop() would wait 5 s for it).
    monkeypatch.setenv("FAKE_KERNEL_ORPHAN", "1")
    process = started()
    answer, code = _exchange(process)
    try:
        assert code == 0
        assert not process.sink_thread.is_alive()
    finally:
        os.kill(answer["orphan"], signal.SIGKILL)


@pytest.mark.parametrize(
    ("environ", "program"),
    [
        pytest.param({"JSII_RUNTIME": "/somewhere/runtime.js"}, PROGRAM, id="a-runtime-the-caller-chose"),
        pytest.param({kernel_start.KEEP_RELAY: "1"}, PROGRAM, id="the-relay-asked-for"),
        pytest.param({"JSII_NODE": "/no/such/node"}, PROGRAM, id="node-not-found-fails-in-jsii"),
        pytest.param({}, None, id="no-program-beside-the-relay"),
        pytest.param({}, "// a kernel that talks on other descriptors\n", id="no-descriptor-3-channel"),
    ],
)
@pytest.mark.usefixtures("direct")
def test_anything_unexpected_starts_the_relay_as_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], program: str | None
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    process = _Process(_layout(tmp_path, program))
    relay: list[Any] = []
    kernel_start.start(process, relay.append)
    assert relay == [process]
    assert not hasattr(process, "_process")


def test_a_relay_asked_for_with_0_is_not_asked_for(
    started: Callable[..., _Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kernel_start.KEEP_RELAY, "0")
    _, code = _exchange(started())  # the fixture fails the test if the relay is started
    assert code == 0


def test_only_jsiis_process_provider_with_the_members_used_is_patched() -> None:
    assert kernel_start.usable(provider)
    assert not kernel_start.usable(types.ModuleType("no_node_process"))
    missing_stop = types.ModuleType("missing_stop")
    only_start = type("_NodeProcess", (), {"start": lambda self: None})
    missing_stop.__dict__["_NodeProcess"] = only_start
    assert not kernel_start.usable(missing_stop)
    assert not kernel_start.patch(missing_stop)
    assert getattr(only_start, "start").__name__ == "<lambda>"  # noqa: B009  (not patched)


def test_only_the_jsii_version_reviewed_is_patched() -> None:
    for version, expected in ((kernel_start.TESTED_JSII, True), ("1.143.0", False), (None, False)):
        other = types.ModuleType("other_jsii")
        other.__dict__["_NodeProcess"] = provider._NodeProcess
        if version is not None:
            other.__dict__["__jsii_runtime_version__"] = version
        assert kernel_start.usable(other) is expected, version


def test_the_version_reviewed_is_the_one_pinned() -> None:
    pins = re.findall(r'"jsii==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pins == [kernel_start.TESTED_JSII]


def test_the_patch_is_applied_once_and_keeps_the_original() -> None:
    start: Any = provider._NodeProcess.start
    assert start.__mlstack_direct__  # the test session's kernel started this way (tests/conftest.py)
    assert kernel_start.patch(provider)
    assert provider._NodeProcess.start is start
    original = getattr(start, "__wrapped__")  # noqa: B009
    assert not getattr(original, "__mlstack_direct__", False)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _command(pid: int) -> list[str]:
    """A process's command line; empty once it has ended (a test process has short-lived children)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def test_this_test_processs_kernel_is_its_own_child_without_the_relay() -> None:
    # Reads processes from /proc, as tests/test_kernel_env.py does: the suite runs on Linux.
    import jsii

    running: Any = jsii.kernel.provider
    kernel = running._process._process  # conftest started it (tests/kernel_env.py)
    relays = [pid for pid in _children(os.getpid()) if any("jsii-runtime.js" in part for part in _command(pid))]
    if "JSII_RUNTIME" in os.environ or os.environ.get(kernel_start.KEEP_RELAY, "") not in ("", "0"):
        # The relay asked for (the escape hatch): jsii's own start ran, and its relay is this process's child.
        assert not isinstance(kernel, kernel_start._Kernel)
        assert relays == [kernel.pid]
        return
    assert isinstance(kernel, kernel_start._Kernel)
    assert _parent(kernel.pid) == os.getpid()
    command = _command(kernel.pid)
    assert command[1:3] == ["--max-old-space-size=4069", "--preserve-symlinks"]
    assert command[-1].endswith("/lib/program.js")
    assert relays == []


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError):  # ended meanwhile
                continue
    return found


def test_a_kernel_whose_python_is_killed_exits() -> None:
    # As through the relay: the kernel reads end of file on descriptor 3 (no copy of Python's end leaked).
    script = (  # the kernel started without loading any library (aws_cdk's load costs a second of CPU)
        "import os, mlstack, jsii\n"
        "print(jsii.kernel.provider._process._process.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    run = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert run.returncode == -signal.SIGKILL, run.stderr
    pid = int(run.stdout)
    deadline = time.monotonic() + 30
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(pid) in (None, "Z"), "the kernel outlived its Python"


def _state(pid: int) -> str | None:
    """A process's state letter (`Z`: exited, not yet reaped), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_real_kernels_own_output_reaches_stderr_as_text() -> None:
    # JSII_DEBUG has the kernel log each request on its stderr: a real kernel's output through the sink, as text (as
    # jsii's own sink decoded the relay's base64 lines).
    script = "import mlstack, constructs\n"  # a small library's load (aws_cdk's costs a second of CPU)
    env = {**os.environ, "JSII_DEBUG": "1"}
    run = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stderr.splitlines()
    assert "[@jsii/kernel] load {" in lines
    assert "  name: 'constructs'," in lines
    assert not [line for line in lines if line.startswith(('{"stderr"', "b'", 'b"'))]
