"""The jsii kernel started as one node process, without jsii's relay process in the middle of every call.

jsii's Python side starts `node bin/jsii-runtime.js` and talks to it over its stdin and stdout. That program is a
relay: it starts the kernel proper (`lib/program.js`, with `--preserve-symlinks`) as a second node process whose
descriptor 3 carries the protocol, copies each request and response between the two, and wraps the kernel's own
stdout and stderr as base64 JSON lines on its stderr. jsii's protocol is a synchronous ping-pong (aws/jsii#5166):
every call waits for its answer, so the copy is paid twice per call, with two more process wake-ups. A synth of
every shipped blueprint makes about 11,000 calls.

Here Python starts `lib/program.js` itself with the relay's descriptor layout: descriptor 3 is one end of a socket
pair (the kernel reads and writes it, as it does the relay's pipe), stdin is /dev/null (the relay gives it
'ignore'), stdout and stderr are pipes whose bytes go to Python's own stdout and stderr as they come (the relay's
JSON lines carried the same bytes). The kernel gets the relay's arguments (jsii's `--max-old-space-size` and
`--preserve-symlinks`, aws/jsii#4181). Measured over the all-blueprint synth, 3 interleaved pairs on 2 CPUs:
8.10-8.42 -> 7.35-7.69 s wall, 10.3-10.7 -> 9.6-10.1 s CPU; templates identical.

What the relay did besides copying, and where it went:
- Node's end-of-life notice (jsii's `checkNode`, printed by the relay) is not printed: mlstack's Makefile runs the
  kernel on the Node it installs (package.json).
- Signals: the relay passed SIGINT and SIGTERM on to its child; the kernel now is the child and gets them itself.
- A kernel whose Python dies reads end-of-file on descriptor 3 and exits, as it did when the relay's stdin closed.

Only `_NodeProcess.start` is replaced, and only where everything it relies on checks out: a POSIX `/bin/sh` (it
moves the socket to descriptor 3), node found, neither `JSII_RUNTIME` chosen by the caller (that runtime is run as
chosen) nor `MLSTACK_JSII_RELAY=1`, jsii's `_NodeProcess` with the members used, its embedded `lib/program.js`
beside `bin/jsii-runtime.js`, and the program reading and writing descriptor 3. Anything else starts the relay as
shipped. `jsii` is pinned in
pyproject.toml; `tests/test_kernel_start.py` checks this process's kernel runs without the relay.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import platform
import selectors
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

PROVIDER = "jsii._kernel.providers.process"
SHELL = "/bin/sh"
KEEP_RELAY = "MLSTACK_JSII_RELAY"
"""Set to 1 to start the kernel as jsii ships it, through the relay (to compare, or to rule this start out)."""
# The kernel's channel in program.js: `new SyncStdio({errorFD: ..., readFD: 3, writeFD: 3})`.
CHANNEL = b"readFD:3,writeFD:3"
# The socket arrives as the shell's stdin; it becomes descriptor 3 and stdin becomes /dev/null, as the relay's child.
MOVE_TO_3 = 'exec "$@" 3<&0 </dev/null'


class _Kernel:
    """What jsii's `_NodeProcess` uses of its `subprocess.Popen`: `stdin` and `stdout` (here the protocol socket),
    `stderr`, `wait` and `terminate`."""

    def __init__(self, popen: subprocess.Popen[bytes], channel: socket.socket) -> None:
        self._popen = popen
        self.stdin = channel.makefile("wb")
        self.stdout = channel.makefile("rb")
        self.stderr = popen.stderr
        channel.close()  # the two files keep the socket open; it closes with the last of them

    @property
    def pid(self) -> int:
        return self._popen.pid

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def terminate(self) -> None:
        self._popen.terminate()


def _sink(streams: dict[str, IO[bytes]]) -> None:
    """Copy the kernel's output pipes to this process's `sys.<stream>` as bytes come (looked up per chunk: a test's
    capture replaces them), each closed at its end of file. One thread until the kernel closed both, as jsii's."""
    with selectors.DefaultSelector() as selector:
        for stream, pipe in streams.items():
            selector.register(pipe, selectors.EVENT_READ, stream)
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]
                    continue
                target = getattr(sys, key.data)
                out = getattr(target, "buffer", None)
                if out is not None:
                    out.write(chunk)
                else:  # a text-only replacement
                    target.write(chunk.decode(errors="replace"))
                target.flush()


def program_beside(entrypoint: str) -> Path | None:
    """jsii's kernel program next to its relay (`<dir>/bin/jsii-runtime.js` -> `<dir>/lib/program.js`), if it is
    there and talks on descriptor 3."""
    relay = Path(entrypoint)
    program = relay.parent.parent / "lib" / "program.js"
    if relay.parent.name != "bin" or not program.is_file():
        return None
    return program if CHANNEL in program.read_bytes() else None


def start(process: Any, original: Callable[[Any], None]) -> None:
    """`_NodeProcess.start` for `process`: the kernel as Python's own child, or `original` where it cannot be."""
    environ = os.environ.copy()
    # A node that is not there fails in jsii's own start, with its error (the shell's would be a closed channel).
    node = shutil.which(environ.get("JSII_NODE", "node"), path=environ.get("PATH"))
    chosen = "JSII_RUNTIME" in environ or environ.get(KEEP_RELAY, "") not in ("", "0")
    program = None if chosen or node is None else program_beside(process._jsii_runtime())
    if node is None or program is None:
        original(process)
        return
    environ["JSII_AGENT"] = f"Python/{platform.python_version()}"
    ours, theirs = socket.socketpair()
    try:
        popen = subprocess.Popen(
            [SHELL, "-c", MOVE_TO_3, "sh", node, "--max-old-space-size=4069", "--preserve-symlinks", str(program)],
            stdin=theirs.fileno(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    assert popen.stdout is not None and popen.stderr is not None
    process._process = _Kernel(popen, ours)
    # jsii's stop() joins `sink_thread` (after the kernel exited) before it closes stderr.
    streams = {"stdout": popen.stdout, "stderr": popen.stderr}
    process.sink_thread = threading.Thread(name="jsii kernel output", target=_sink, args=(streams,), daemon=True)
    process.sink_thread.start()
    atexit.register(process.stop)
    process.handshake()


def usable(provider: ModuleType) -> bool:
    """Whether the direct start can replace the relay for jsii's process provider `provider` (a `JSII_RUNTIME`
    is looked at when the kernel starts, as jsii does)."""
    if os.name != "posix" or not Path(SHELL).exists():
        return False
    node_process = getattr(provider, "_NodeProcess", None)
    if not all(callable(getattr(node_process, name, None)) for name in ("start", "_jsii_runtime", "handshake", "stop")):
        return False
    try:
        import jsii._embedded.jsii as embedded
    except ImportError:
        return False
    files = getattr(embedded, "EMBEDDED_FILES", {})
    return files.get(getattr(embedded, "ENTRYPOINT", None)) == "bin/jsii-runtime.js" and "lib/program.js" in (
        files.values()
    )


def patch(provider: ModuleType) -> bool:
    """Replace `_NodeProcess.start` in jsii's process provider `provider` (once); whether it was."""
    node_process = getattr(provider, "_NodeProcess", None)
    current = getattr(node_process, "start", None)
    if getattr(current, "__mlstack_direct__", False):
        return True
    if not usable(provider):
        return False
    original = current

    def direct_start(self: Any) -> None:
        start(self, original)  # type: ignore[arg-type]

    direct_start.__mlstack_direct__ = True  # type: ignore[attr-defined]
    direct_start.__wrapped__ = original  # type: ignore[attr-defined]
    node_process.start = direct_start  # type: ignore[union-attr]
    return True


class _ThenLoader(importlib.abc.Loader):
    """A module's own loader, and `then(module)` once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[ModuleType], object]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface (resources, source)
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` right after `name` is first imported, without importing it earlier (jsii costs about
    70 ms to import, and mlstack's guidance commands never start a kernel)."""

    def __init__(self, name: str, then: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the finders below answer the search
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenLoader(spec.loader, self.then)
                return spec
        return None


def install() -> None:
    """Have jsii's process provider start the kernel directly: now if it is imported, else when it is."""
    if PROVIDER in sys.modules:
        patch(sys.modules[PROVIDER])
    elif not any(isinstance(finder, _AfterImport) and finder.name == PROVIDER for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(PROVIDER, patch))
