"""The template-validation worker: aws-cdk-lib's own validation engine in a Node process beside the jsii kernel.

CDK validates every template at synth with `@aws/cloudformation-validate`, a WebAssembly engine it bundles. In the
jsii kernel that work is serial with everything else: making the engine (about 0.6 s) and then validating one
template after another (about 30 ms each), while the Python process waits and the machine's second core idles.
Here the same engine runs in a worker process (`validate_worker.cjs`) that starts while the blueprints are being
built, so the engine is ready when synth needs it: its start overlaps the build instead of following it.

The engine is the one the installed aws-cdk-lib bundles, never a copy of another version: its folder is read out of
aws-cdk-lib's jsii tarball (in the Python package) into a cache keyed by the tarball's SHA-256, once per version.
Where that cannot be done (no `node`, no private writable cache, an engine that does not load)
`ValidationWorker.ready()` is False and the caller registers CDK's own plugin instead.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import IO, Any

from mlstack.errors import MlstackError

ENGINE_PREFIX = "package/node_modules/@aws/cloudformation-validate/"
"""Where aws-cdk-lib's tarball holds the engine package."""

ENGINE_OPTIONS: dict[str, Any] = {
    "detailLevel": "STANDARD",
    "exclude": {
        "ids": ["W3005", "W1020", "E1018", "W9002", "W9013", "W1103"],
        "services": [{"ruleId": "W3697", "service": "AWS::AutoScaling"}],
    },
    "severityLevel": "WARN",
}
"""What aws-cdk-lib's CloudFormationValidatePlugin passes to `validateTemplate` (core/lib/validation/
cloudformation-validate-plugin.js, 2.275.0: its IGNORE_RULES and the AutoScaling exclusion); the pseudo parameters
come per stack. tests/blueprints/test_validation.py reads them back out of the installed aws-cdk-lib."""


def cdk_tarball() -> Path:
    """aws-cdk-lib's jsii tarball inside the installed Python package."""
    spec = importlib.util.find_spec("aws_cdk._jsii")
    if spec is None or spec.origin is None:
        raise MlstackError("aws-cdk-lib's jsii package is not installed")
    found = sorted(Path(spec.origin).parent.glob("aws-cdk-lib@*.jsii.tgz"))
    if len(found) != 1:
        raise MlstackError(f"expected one aws-cdk-lib jsii tarball beside {spec.origin}, found {len(found)}")
    return found[0]


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """`$XDG_CACHE_HOME/mlstack`, or `~/.cache/mlstack`."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlstack"


ENGINE_MARKER = ".mlstack-complete"
"""Written last into an engine folder: a folder without it (a copy cut short) is never used."""


def engine_package(tarball: Path, root: Path) -> Path:
    """The engine's package folder, read out of `tarball` into `root` the first time (into a scratch folder, renamed
    into place once whole: a folder another process is still writing is never read)."""
    digest = hashlib.sha256()
    with tarball.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    cache = root / "cloudformation-validate"
    target = cache / f"{tarball.name}-{digest.hexdigest()[:16]}"
    # Private, as jsii keeps its own package cache: the worker runs the JavaScript it finds there.
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(cache)
    if (target / ENGINE_MARKER).is_file():
        _check_private(target)
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        staging = Path(scratch) / "engine"
        staging.mkdir()
        with tarfile.open(tarball) as archive:
            for member in archive:
                if not (member.isfile() and member.name.startswith(ENGINE_PREFIX)):
                    continue
                relative = Path(member.name[len(ENGINE_PREFIX) :])
                if relative.is_absolute() or ".." in relative.parts:
                    raise MlstackError(f"unexpected path in {tarball.name}: {member.name}")
                source = archive.extractfile(member)
                assert source is not None
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                (staging / relative).write_bytes(source.read())
        if not (staging / "package.json").is_file():
            raise MlstackError(f"{tarball.name} holds no {ENGINE_PREFIX}package.json")
        (staging / ENGINE_MARKER).write_text(tarball.name)
        if target.exists():  # an earlier copy cut short (no marker): replace it
            shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(OSError):  # another process put the same folder there first: use that one
            staging.rename(target)
    if not (target / ENGINE_MARKER).is_file():
        raise MlstackError(f"could not write the validation engine to {target}")
    return target


def _check_private(folder: Path) -> None:
    """Refuse a folder another user could have written (a shared XDG_CACHE_HOME): its code would run here."""
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise MlstackError(f"{folder} is not private to this user (owner {info.st_uid}, mode {info.st_mode:o})")


def node_executable(environ: Mapping[str, str] = os.environ) -> str:
    """The `node` the jsii kernel runs (jsii takes it from PATH, or JSII_NODE)."""
    found = environ.get("JSII_NODE") or shutil.which("node", path=environ.get("PATH"))
    if not found:
        raise MlstackError("node is not on PATH")
    return found


class WorkerGoneError(MlstackError):
    """The worker process ended or answered out of protocol: it is not asked again."""


class _Process:
    """The node process and its first line: the engine's version and rule IDs, written once the engine is made."""

    def __init__(self, node: str, package: Path, script: Path, environ: Mapping[str, str]) -> None:
        # A file, not a pipe: nothing reads stderr until the process fails, and a full pipe would stall it.
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (close() closes it)
        try:
            # The environment the caller gave: PATH (which node) and NODE_OPTIONS (mlstack.kernel's preload, so the
            # engine is compiled as in the kernel) come from the same place.
            self.popen = subprocess.Popen(
                [node, str(script), str(package), json.dumps(ENGINE_OPTIONS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                env=dict(environ),
                encoding="utf-8",
            )
        except BaseException:
            self.stderr.close()
            raise
        self.version = "0.0.0"
        self.rule_ids: list[str] = []

    def wait_started(self) -> None:
        """Read the first line (blocks until the engine is made); WorkerGoneError if it is not the expected one."""
        started = self.receive()
        if not (isinstance(started, dict) and isinstance(started.get("version"), str)):
            raise WorkerGoneError(f"the template validation worker did not start: {self.failure(started)}")
        self.version = started["version"]
        self.rule_ids = list(started.get("ruleIds", []))

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
        """End the process now: it holds nothing to save, and may still be making its engine."""
        if self.popen.poll() is None:
            self.popen.terminate()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


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
        self._spawned: _Process | None = None  # the process while its engine is being made
        self._closing = False
        self._error: BaseException | None = None
        self._files = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._starter = threading.Thread(target=self._start, name="mlstack-validation-worker", daemon=True)
        self._starter.start()

    def _start(self) -> None:
        package: Path | None = None
        try:
            node = node_executable(self._environ)
            package = engine_package(cdk_tarball(), cache_root(self._environ))
            # The script's path for the worker's life: from a zipped install, as_file's copy is removed on exit.
            script = self._files.enter_context(resources.as_file(resources.files("mlstack") / "validate_worker.cjs"))
            if self._closing:
                raise MlstackError("closed before it started")
            self._spawned = _Process(node, package, script, self._environ)
            self._spawned.wait_started()
            self._process = self._spawned
        except WorkerGoneError as err:
            self._error = err
            if self._spawned is not None:
                self._spawned.stderr.close()
            if package is not None and not self._closing:
                # An engine that does not load (a damaged copy): read it out again next time.
                shutil.rmtree(package, ignore_errors=True)
        except Exception as err:  # any failure to start means: use CDK's own plugin
            self._error = err

    def ready(self) -> bool:
        """Whether the engine is up (waits for it); False: use CDK's own plugin (`start_error` says why)."""
        self._starter.join()
        return self._process is not None

    @property
    def start_error(self) -> BaseException | None:
        self._starter.join()
        return self._error

    @property
    def closed(self) -> bool:
        """True when the worker is of no more use: never started, failed, or closed."""
        return not self.ready()

    @property
    def version(self) -> str:
        """The engine core's version, what CDK's plugin reports as its own ("0.0.0" if the engine never started)."""
        return self._started().version if self.ready() else "0.0.0"

    @property
    def rule_ids(self) -> list[str]:
        """The rules CDK's plugin reports (CDKMetadata's analytics): the engine's, less CDK's ignored ones and the
        INFO and DEBUG ones."""
        return list(self._started().rule_ids) if self.ready() else []

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

    def _end(self, process: _Process, error: BaseException) -> None:
        process.close()
        process.stderr.close()
        self._process = None
        self._error = error

    def close(self) -> None:
        """End the worker now, also while its engine is still being made (a synth that failed before needing it)."""
        self._closing = True
        spawned = self._spawned
        if spawned is not None and self._starter.is_alive():
            spawned.close()  # its first line never comes: the starting thread ends with WorkerGoneError
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
