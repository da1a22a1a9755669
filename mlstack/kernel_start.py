"""The jsii kernel started as one node process, without jsii's relay process in the middle of every call.

jsii's Python side starts `node bin/jsii-runtime.js` and talks to it over its stdin and stdout. That program is a
relay: it starts the kernel proper (`lib/program.js`, with `--preserve-symlinks`) as a second node process whose
descriptor 3 carries the protocol, copies each request and response between the two, and wraps the kernel's own
stdout and stderr as base64 JSON lines on its stderr. jsii's protocol is a synchronous ping-pong (aws/jsii#5166):
every call waits for its answer, so the copy is paid twice per call, with two more process wake-ups. A synth of
every shipped blueprint makes about 11,000 calls.

Here Python starts `lib/program.js` itself with the relay's descriptor layout: descriptor 3 is one end of a socket
pair (blocking, as the kernel's synchronous reads need; the kernel reads and writes it as it did the relay's pipe),
stdin is /dev/null (the relay gives it 'ignore'), stdout and stderr are pipes whose bytes go to Python's own stdout
and stderr as they come (jsii's Python side decoded the relay's JSON lines to the same bytes). The kernel gets the
relay's arguments (jsii's `--max-old-space-size` and `--preserve-symlinks`, aws/jsii#4181). Measured over the
all-blueprint synth (`python -m mlstack.synth_all`), 4 interleaved pairs with and without `MLSTACK_JSII_RELAY=1`
on 2 CPUs: 8.27-8.97 -> 7.61-8.25 s wall, 10.5-11.2 -> 9.9-10.7 s CPU; templates identical.

What the relay did besides copying, and where it went:
- The relay's Node notices (jsii's `checkNode`, from its table of Node releases: end of life, untested, known
  broken, deprecated) are not printed. In their place the kernel's preload (kernel_preload.cjs, when NODE_OPTIONS
  has it, as mlstack.kernel sets) warns on a Node older than `NODE_OLDEST`, the oldest mlstack is tested on
  (silenced as jsii's is, by the major version in JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION); mlstack's
  Makefile runs everything on the Node it installs from npm (package.json).
- Signals sent to the relay's own pid (SIGINT, SIGTERM, SIGHUP, SIGQUIT) were passed on to the kernel; the kernel's
  pid is now the one Python holds. Ctrl-C reaches the kernel through the terminal's process group, as before.
- A kernel whose Python dies reads end-of-file on descriptor 3 and exits, as it did when the relay's stdin closed;
  jsii's `stop()` closing stdin ends the socket's sending side, so the kernel reads end-of-file then too.
- A process forked after the kernel started shares its channel, as it shared the relay's pipes: a forked child
  that uses the kernel or ends through atexit disturbs the parent's kernel either way (multiprocessing's children
  end with os._exit and do not).

Only `_NodeProcess.start` is replaced, and only where everything it relies on checks out: Linux or macOS with
`/bin/sh` (it moves the socket to descriptor 3; on macOS, whose socket buffers are smaller than a pipe's, the gain
was not measured), node found, neither `JSII_RUNTIME` chosen by the caller (that runtime is run as chosen) nor
`MLSTACK_JSII_RELAY` set (to anything but 0), the jsii version reviewed (`TESTED_JSII`, pinned in pyproject.toml)
with `_NodeProcess` and the methods this calls, its embedded `lib/program.js` beside `bin/jsii-runtime.js`, and
the program reading and writing descriptor 3. A kernel that then fails its handshake (a `node` wrapper that does
not pass descriptor 3 on) is ended, its output shown. Each of these starts the relay as shipped.
`tests/test_kernel_start.py` fails when the start stops applying (another jsii), so an upgrade gets reviewed.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

from mlstack.after_import import call_after_import

if TYPE_CHECKING:
    import socket
    import subprocess

PROVIDER = "jsii._kernel.providers.process"
TESTED_JSII = "1.142.0"
"""The jsii whose process provider this start replaces, as reviewed and tested (pinned in pyproject.toml); with any
other, jsii's own start runs (tests/test_kernel_start.py then fails, so an upgrade gets reviewed here)."""
SHELL = "/bin/sh"
NODE_OLDEST = 22
"""The oldest Node major version mlstack is tested on (package.json brings 22.23.3; jsii 1.142 flags Node 20 as
end-of-life since 2026-10-30). The kernel's preload (kernel_preload.cjs) warns below it, in place of the relay's
end-of-life notice."""
KEEP_RELAY = "MLSTACK_JSII_RELAY"
"""Set (to anything but empty or 0) to start the kernel as jsii ships it, through the relay: to compare, or to rule
this start out."""
# The kernel's channel in program.js: `new SyncStdio({errorFD: ..., readFD: 3, writeFD: 3})`.
CHANNEL = b"readFD:3,writeFD:3"
# The socket arrives as the shell's stdin; it becomes descriptor 3 and stdin becomes /dev/null, as the relay's child.
MOVE_TO_3 = 'exec "$@" 3<&0 </dev/null'


class _Requests:
    """The protocol's sending side: a buffered writer on the socket whose `close()` also shuts the socket's sending
    side down. jsii's `stop()` closes stdin to tell the kernel it is done; a kernel reading again after its exit
    request (one interrupted inside a callback) then reads end-of-file and exits instead of waiting out stop()'s
    5 s."""

    def __init__(self, channel: socket.socket) -> None:
        import socket

        self._channel = channel
        self._file = channel.makefile("wb")
        self._shut = socket.SHUT_WR  # kept: close() may run in a late __del__, when imports fail

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, data: bytes) -> int:
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        # Each step even if the kernel is gone (a broken pipe): jsii's stop() goes on to wait for it and drain its
        # output, where the kernel's own last words are (a stop() that raised here would lose them).
        if self._file.closed:
            return
        with contextlib.suppress(OSError):
            self._file.flush()
        with contextlib.suppress(OSError):
            self._channel.shutdown(self._shut)
        with contextlib.suppress(OSError):
            self._file.close()


class _Kernel:
    """What jsii's `_NodeProcess` uses of its `subprocess.Popen`: `stdin` and `stdout` (here the two sides of the
    protocol socket), `stderr`, `wait` and `terminate`."""

    def __init__(self, popen: subprocess.Popen[bytes], channel: socket.socket, ended: int) -> None:
        self._popen = popen
        self.stdin = _Requests(channel)
        self.stdout = channel.makefile("rb")
        self.stderr = popen.stderr
        channel.close()  # the files keep the socket open; it closes with the last of them (socket.makefile)
        self._ended = ended

    @property
    def pid(self) -> int:
        return self._popen.pid

    def wait(self, timeout: float | None = None) -> int:
        code = self._popen.wait(timeout)
        self._tell_sink()
        return code

    def terminate(self) -> None:
        self._popen.terminate()
        self._tell_sink()

    def _tell_sink(self) -> None:
        """The kernel has ended (or is being ended): the sink copies what is there to read, then stops, rather than
        wait for end of file that a child still holding the kernel's stdout or stderr would put off (jsii's stop()
        waits 5 s for the sink; a daemon thread still writing at exit can abort the interpreter)."""
        # Taken out before use (dict.pop is atomic): two threads stopping the kernel at once must not write to or
        # close a descriptor number the other has already closed and something else may have reopened.
        ended = self.__dict__.pop("_ended", None)
        if ended is not None:
            with contextlib.suppress(OSError):
                os.write(ended, b"x")
            os.close(ended)


def _write(stream: str, chunk: bytes, decoder: codecs.IncrementalDecoder, *, final: bool = False) -> None:
    """`chunk` to this process's `sys.<stream>` (looked up each time: a test's capture replaces it); `final` at the
    stream's end of file (a character left incomplete is written as U+FFFD to a text-only stream)."""
    target = getattr(sys, stream)
    out = getattr(target, "buffer", None)
    if out is not None:
        view = memoryview(chunk)
        while view:  # a raw file (python -u) may write part of it
            written = out.write(view)
            if not written:
                break
            view = view[written:]
        out.flush()
    else:  # a text-only replacement
        text = decoder.decode(chunk, final=final)
        if text:
            target.write(text)
            target.flush()


def _sink(streams: dict[str, IO[bytes]], ended: int) -> None:
    """Copy the kernel's output pipes to this process's streams as bytes come, until both reach end of file, or
    until `ended` (a pipe) becomes readable: then what can be read at once, and stop. The pipes are closed at the
    end, and what is left after a second of reading at once (a child that goes on writing). One thread, as jsii's
    own. Bytes that cannot be written (no `sys.stdout`, a closed pipe or capture) are dropped: the pipes are always
    drained, or a kernel writing to a full one would block (jsii's sink prints a line it cannot parse; here it is
    the target that failed)."""
    import selectors
    import time

    decoders = {stream: codecs.getincrementaldecoder("utf-8")(errors="replace") for stream in streams}
    try:
        with selectors.DefaultSelector() as selector:
            for stream, pipe in streams.items():
                selector.register(pipe, selectors.EVENT_READ, stream)
            selector.register(ended, selectors.EVENT_READ, None)
            ending: float | None = None  # when the kernel was reported ended
            while any(key.data is not None for key in selector.get_map().values()):
                events = selector.select(None if ending is None else 0)
                if ending is not None and (not events or time.monotonic() - ending > 1):
                    break  # nothing more to read now, or a child that keeps writing
                for key, _ in events:
                    if key.data is None:
                        selector.unregister(key.fileobj)
                        ending = time.monotonic()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        chunk, final = b"", True
                    else:
                        final = False
                    with contextlib.suppress(Exception):  # never stop reading
                        _write(key.data, chunk, decoders[key.data], final=final)
    finally:
        for pipe in streams.values():
            pipe.close()
        os.close(ended)


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
    import atexit
    import platform
    import shutil
    import socket
    import subprocess
    import threading

    environ = os.environ.copy()
    # A node that is not there fails in jsii's own start, with its error (the shell's would be a closed channel).
    node = shutil.which(environ.get("JSII_NODE", "node"), path=environ.get("PATH"))
    chosen = "JSII_RUNTIME" in environ or environ.get(KEEP_RELAY, "") not in ("", "0")
    program = None if chosen or node is None else program_beside(process._jsii_runtime())
    if node is None or program is None:
        original(process)
        return
    environ["JSII_AGENT"] = f"Python/{platform.python_version()}"
    environ["MLSTACK_NODE_OLDEST"] = str(NODE_OLDEST)
    sink_ended, kernel_ended = os.pipe()
    ours, theirs = socket.socketpair()
    # Blocking both ends, whatever socket.setdefaulttimeout() says: the flag is shared with the kernel's descriptor
    # 3, whose reads (fs.readSync) fail with EAGAIN on a non-blocking one, and jsii's reads here have no timeout.
    ours.setblocking(True)
    theirs.setblocking(True)
    try:
        popen = subprocess.Popen(
            [SHELL, "-c", MOVE_TO_3, "sh", node, "--max-old-space-size=4069", "--preserve-symlinks", str(program)],
            stdin=theirs.fileno(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
        )
    except BaseException:
        for fd in (sink_ended, kernel_ended):
            os.close(fd)
        ours.close()
        raise
    finally:
        theirs.close()
    assert popen.stdout is not None and popen.stderr is not None
    kernel = _Kernel(popen, ours, kernel_ended)
    process._process = kernel
    # jsii's stop() joins `sink_thread` (after the kernel exited) before it closes stderr.
    streams = {"stdout": popen.stdout, "stderr": popen.stderr}
    process.sink_thread = threading.Thread(
        name="jsii kernel output", target=_sink, args=(streams, sink_ended), daemon=True
    )
    process.sink_thread.start()
    try:
        process.handshake()
    except Exception as err:  # any failure to talk: the relay, which may work or say why not
        # A kernel that cannot talk on descriptor 3 (a `node` wrapper that does not pass it on, a sandbox): ended,
        # its output drained (its own error is there), and the relay started as jsii would.
        try:
            kernel.wait(timeout=5)  # one that could not talk has usually ended, its error written
        except subprocess.TimeoutExpired:
            kernel.terminate()
            kernel.wait()
        process.sink_thread.join(timeout=5)
        kernel.stdin.close()
        kernel.stdout.close()
        del process._process, process.sink_thread
        print(
            f"mlstack: the jsii kernel did not start directly ({err!r}); starting it through jsii's relay",
            file=sys.stderr,
        )
        original(process)
        return
    atexit.register(process.stop)


def usable(provider: ModuleType) -> bool:
    """Whether the direct start can replace the relay for jsii's process provider `provider` (a `JSII_RUNTIME`
    is looked at when the kernel starts, as jsii does)."""
    if sys.platform not in ("linux", "darwin") or not Path(SHELL).exists():  # Cygwin/MSYS: a Windows node
        return False
    if getattr(provider, "__jsii_runtime_version__", None) != TESTED_JSII:
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


def install() -> None:
    """Have jsii's process provider start the kernel directly: now if it is imported, else right after it is
    (importing jsii costs about 70 ms, which mlstack's guidance commands never need)."""
    call_after_import(PROVIDER, patch)
