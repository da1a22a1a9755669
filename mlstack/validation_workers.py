"""The template-validation worker: aws-cdk-lib's own validation engine in a Node process beside the jsii kernel.

CDK validates every template at synth with `@aws/cloudformation-validate`, a WebAssembly engine it bundles. In the
jsii kernel that work is serial with everything else: making the engine (about 0.6 s) and then validating one
template after another (about 30 ms each), while the Python process waits and the machine's second core idles.
Here the same engine runs in a worker process (`validate_worker.cjs`) that starts while the blueprints are being
built, so the engine is ready when synth needs it: its start overlaps the build instead of following it.

The engine is the one the installed aws-cdk-lib bundles, never a copy of another version: `mlstack.validation_engine`
reads its folder out of aws-cdk-lib's jsii tarball into a private cache, once per tarball.
Where that cannot be done (no `node`, no private writable cache, an engine that does not load)
`ValidationWorker.ready()` is False and the caller registers CDK's own plugin instead.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import IO, Any

from mlstack.errors import MlstackError
from mlstack.kernel import worker_node_options
from mlstack.validation_engine import ENGINE_OPTIONS, cache_root, cdk_tarball, engine_package

START_TIMEOUT_S = 120
"""How long a synth waits for the worker's engine (it takes about a second) before it validates in the kernel."""


def node_executable(environ: Mapping[str, str] = os.environ) -> str:
    """The `node` the jsii kernel runs (jsii takes it from PATH, or JSII_NODE)."""
    found = environ.get("JSII_NODE") or shutil.which("node", path=environ.get("PATH"))
    if not found:
        raise MlstackError("node is not on PATH")
    return found


class WorkerGoneError(MlstackError):
    """The worker process ended or answered out of protocol: it is not asked again."""


class _Process:
    """The node process, one JSON line per request and per reply (the protocol is in `validate_worker.cjs`)."""

    def __init__(self, node: str, package: Path, script: Path, environ: Mapping[str, str]) -> None:
        # A file, not a pipe: nothing reads stderr until the process fails, and a full pipe would stall it.
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (close() closes it)
        try:
            # The environment the caller gave: PATH (which node) and NODE_OPTIONS (mlstack.kernel's preload, so the
            # engine is compiled as in the kernel) come from the same place.
            self.popen = subprocess.Popen(
                # Single-threaded: the worker's work is one synchronous call after another, and V8's helper threads
                # (concurrent GC and compilation) only added CPU: engine and 46 templates 2.6 -> 1.85 s of CPU,
                # 2.1 -> 1.8 s wall, measured alone. Not allowed in NODE_OPTIONS, so on the command line.
                [node, "--single-threaded", str(script), str(package), json.dumps(ENGINE_OPTIONS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                env={**environ, "NODE_OPTIONS": worker_node_options(environ.get("NODE_OPTIONS", ""))},
                encoding="utf-8",
                # Its own session: a Ctrl-C at the terminal reaches Python, which ends the worker on its way out.
                start_new_session=True,
            )
        except BaseException:
            self.stderr.close()
            raise

    def wait_started(self) -> tuple[str, list[str]]:
        """The first line (blocks until the engine is made): the engine's version and rule IDs; WorkerGoneError if
        it is not that."""
        started = self.receive()
        if not (isinstance(started, dict) and isinstance(started.get("version"), str)):
            raise WorkerGoneError(f"the template validation worker did not start: {self.failure(started)}")
        return started["version"], list(started.get("ruleIds", []))

    def send(self, request: object) -> None:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(json.dumps(request) + "\n")
            self.popen.stdin.flush()
        except BrokenPipeError:
            pass  # the reply read next is empty, and says so

    def receive(self) -> Any:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        try:
            return json.loads(line) if line else None
        except json.JSONDecodeError:
            return line

    def failure(self, reply: object) -> str:
        """Why the process is of no more use (its stderr, or the reply it gave), ending it."""
        self.close()
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()[-2000:]
        return text or f"exit status {self.popen.returncode}, reply {str(reply)[:200]!r}"

    def close(self) -> None:
        """End the process now (it holds nothing to save, and may still be making its engine), then its pipes: a
        thread reading its first line gets the end of the stream."""
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


Stack = Mapping[str, Any]
"""{templatePath, accountId, region}: what the worker validates (CDK's PolicyValidationStack, by its JS names)."""


class ValidationWorker:
    """One worker, started by a thread of its own so that the caller goes on building meanwhile; ready once the
    engine is made. A request interrupted before its reply (KeyboardInterrupt, a timeout signal) or answered out of
    protocol ends the process, so that no later request reads an earlier one's reply.

    One, not several sharing the templates out: on 2 CPUs a second engine's start cost the build more than the
    split saved (all blueprints, 2 runs each: 1 worker 9.75-9.85 s wall, 2 workers 9.93-10.15 s, 3 10.8-11.3 s)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = dict(environ)
        self._process: _Process | None = None
        self._spawned: _Process | None = None  # the process, from its start (the engine may still be being made)
        self._closing = False
        self._spawn_lock = threading.Lock()  # between the starting thread's spawn and close()
        self._error: BaseException | None = None
        self._version = "0.0.0"
        self._rule_ids: list[str] = []
        self._files = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._starter = threading.Thread(target=self._start, name="mlstack-validation-worker", daemon=True)
        self._starter.start()

    def _start(self) -> None:
        try:
            node = node_executable(self._environ)
            package = engine_package(cdk_tarball(), cache_root(self._environ))
            # The script's path for the worker's life: from a zipped install, as_file's copy is removed on exit.
            script = self._files.enter_context(resources.as_file(resources.files("mlstack") / "validate_worker.cjs"))
            with self._spawn_lock:
                if self._closing:
                    raise MlstackError("closed before it started")
                self._spawned = spawned = _Process(node, package, script, self._environ)
            try:
                self._version, self._rule_ids = spawned.wait_started()
            except BaseException:
                spawned.close()
                spawned.stderr.close()
                raise
            self._process = spawned
        except Exception as err:  # any failure to start means: use CDK's own plugin (start_error says why)
            self._error = err

    def ready(self) -> bool:
        """Whether the engine is up (waits for it); False: use CDK's own plugin (`start_error` says why). A worker
        not up after START_TIMEOUT_S (a node that hangs) is ended."""
        self._starter.join(START_TIMEOUT_S)
        if self._starter.is_alive():
            self.close()
        return self._process is not None

    @property
    def start_error(self) -> BaseException | None:
        self.ready()
        return self._error

    @property
    def closed(self) -> bool:
        """True when the worker is of no more use: never started, failed, or closed."""
        return not self.ready()

    @property
    def version(self) -> str:
        """The engine core's version, what CDK's plugin reports as its own ("0.0.0" if the engine never started;
        kept after the worker ends, so a report made by the fallback says the same)."""
        self.ready()
        return self._version

    @property
    def rule_ids(self) -> list[str]:
        """The rules CDK's plugin reports (CDKMetadata's analytics): the engine's, less CDK's ignored ones and the
        INFO and DEBUG ones. Kept after the worker ends."""
        self.ready()
        return list(self._rule_ids)

    def _started(self) -> _Process:
        assert self._process is not None
        return self._process

    def validate(self, stacks: Sequence[Stack]) -> list[list[dict[str, Any]]]:
        """The diagnostics of each stack's template, in the order given. A template the engine fails on raises
        MlstackError naming it; a worker that ended or answered out of protocol raises WorkerGoneError."""
        with self._lock:
            if not self.ready():
                raise WorkerGoneError(f"the template validation worker is not running: {self._error}")
            process = self._started()
            try:
                process.send([dict(stack) for stack in stacks])
                reply = process.receive()
            except BaseException:
                self._end(process, MlstackError("a request was interrupted"))
                raise
            if isinstance(reply, dict) and isinstance(reply.get("error"), str):
                raise MlstackError(f"template validation failed: {reply['error']}")
            if not isinstance(reply, list) or len(reply) != len(stacks):
                error = WorkerGoneError(f"the template validation worker failed: {process.failure(reply)}")
                self._end(process, error)
                raise error
            return reply

    def expect(self, stacks: Sequence[Stack]) -> None:
        """Have the worker validate each of these templates as soon as the synth has written it (before CDK asks):
        `validate` then answers from those results for each template whose bytes are unchanged. Nothing if the
        worker is not running (`validate` says so)."""
        self._request({"expect": [dict(stack) for stack in stacks]}, "expecting")

    def stats(self) -> dict[str, int]:
        """Since the last `expect`: templates validated early, and `validate`'s answers from them (hits) or not; and
        how many templates the worker still looks for (expecting)."""
        return self._request({"stats": True}, "early")

    def _request(self, request: dict[str, Any], answer: str) -> dict[str, int]:
        with self._lock:
            if not self.ready():
                return {}
            process = self._started()
            try:
                process.send(request)
                reply = process.receive()
            except BaseException:
                self._end(process, MlstackError("a request was interrupted"))
                raise
            if not (isinstance(reply, dict) and answer in reply):
                self._end(process, WorkerGoneError(f"the template validation worker failed: {process.failure(reply)}"))
                return {}
            return reply

    def _end(self, process: _Process, error: BaseException) -> None:
        process.close()
        process.stderr.close()
        self._process = None
        self._error = error

    def close(self) -> None:
        """End the worker now, also while its engine is still being made (a synth that failed before needing it)."""
        with self._spawn_lock:
            self._closing = True
            spawned = self._spawned
        if spawned is not None and self._starter.is_alive():
            spawned.close()  # its first line never comes: the starting thread ends
        self._starter.join()
        with self._lock:
            if self._process is not None:
                self._end(self._process, MlstackError("it was closed"))
        self._files.close()


_running: ValidationWorker | None = None
_running_lock = threading.Lock()


def start_worker(environ: Mapping[str, str] = os.environ) -> ValidationWorker:
    """The process's worker, started on the first call (the engine's start is paid once per process, like CDK's
    singleton plugin) and again after it failed or was closed; closed at exit. A running worker keeps the
    environment it was started with."""
    global _running
    with _running_lock:
        if _running is None or _running.closed:
            if _running is not None:
                _running.close()
            _running = ValidationWorker(environ)
        return _running


@atexit.register
def close_worker() -> None:
    """End the process's worker (it would end with this process anyway: its stdin closes)."""
    global _running
    with _running_lock:
        if _running is not None:
            _running.close()
            _running = None
