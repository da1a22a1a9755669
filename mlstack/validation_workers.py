"""The template-validation worker: aws-cdk-lib's own validation engine in a Node process beside the jsii kernel.

CDK validates every template at synth with `@aws/cloudformation-validate`, a WebAssembly engine it bundles. In the
jsii kernel that work is serial with everything else: making the engine (about 0.6 s) and then validating one
template after another (about 30 ms each), while the Python process waits and the machine's second core idles.
Here the same engine runs in a worker process (`validate_worker.cjs`) that starts while the blueprints are being
built, so the engine is ready when synth needs it, and validates while the kernel waits on nothing else.

The engine is the one the installed aws-cdk-lib bundles, never a copy of another version: its folder is read out of
aws-cdk-lib's jsii tarball (in the Python package) into a cache keyed by the tarball's SHA-256, once per version.
Where that cannot be done (no writable cache, no `node`) `ValidationWorker.ready()` is False and the caller
registers CDK's own plugin instead.
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
from typing import IO, Any, NoReturn

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
come per stack. tests/blueprints/test_validation_workers.py reads them back out of the installed aws-cdk-lib."""


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


def engine_package(tarball: Path, root: Path) -> Path:
    """The engine's package folder, read out of `tarball` into `root` the first time (atomically: a folder of
    another process's that is being written is never read)."""
    digest = hashlib.sha256()
    with tarball.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    target = root / "cloudformation-validate" / f"{tarball.name}-{digest.hexdigest()[:16]}"
    if (target / "package.json").is_file():
        return target
    # Private, as jsii keeps its own package cache: the worker runs the JavaScript it finds there.
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
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
        with contextlib.suppress(OSError):  # another process put the same folder there first: use that one
            staging.rename(target)
    if not (target / "package.json").is_file():
        raise MlstackError(f"could not write the validation engine to {target}")
    return target


def node_executable(environ: Mapping[str, str] = os.environ) -> str:
    """The `node` the jsii kernel runs (jsii takes it from PATH, or JSII_NODE)."""
    found = environ.get("JSII_NODE") or shutil.which("node", path=environ.get("PATH"))
    if not found:
        raise MlstackError("node is not on PATH")
    return found


class _Worker:
    def __init__(self, node: str, package: Path, script: Path) -> None:
        # A file, not a pipe: nothing reads stderr until the process fails, and a full pipe would stall it.
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (close() closes it)
        self.popen = subprocess.Popen(
            [node, str(script), str(package), json.dumps(ENGINE_OPTIONS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def send(self, request: object) -> None:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(json.dumps(request) + "\n")
            self.popen.stdin.flush()
        except BrokenPipeError:
            pass  # the reply read below is empty and says so

    def receive(self) -> Any:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        try:
            return json.loads(line) if line else None
        except json.JSONDecodeError:
            return None

    def failure(self) -> str:
        self.close()
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()[-2000:]
        return text or f"exit status {self.popen.returncode}"

    def close(self) -> None:
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


Stack = Mapping[str, Any]
"""{templatePath, accountId, region}: what the worker validates (CDK's PolicyValidationStack, by its JS names)."""


class ValidationWorker:
    """One worker, started by a thread of its own so that the caller goes on building meanwhile.

    One, not several sharing the templates out: on 2 CPUs a second engine's start cost the build more than the
    split saved (all blueprints, 2 runs each: 1 worker 9.75-9.85 s wall, 2 workers 9.93-10.15 s, 3 10.8-11.3 s)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = dict(environ)
        self._worker: _Worker | None = None
        self._error: BaseException | None = None
        self._files = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._version: str | None = None
        self._starter = threading.Thread(target=self._start, name="mlstack-validation-worker", daemon=True)
        self._starter.start()

    def _start(self) -> None:
        try:
            node = node_executable(self._environ)
            package = engine_package(cdk_tarball(), cache_root(self._environ))
            # The script's path for the worker's life: from a zipped install, as_file's copy is removed on exit.
            script = self._files.enter_context(resources.as_file(resources.files("mlstack") / "validate_worker.cjs"))
            self._worker = _Worker(node, package, script)
        except (OSError, MlstackError, tarfile.TarError) as err:
            self._error = err

    def ready(self) -> bool:
        """Whether the worker started (waits for the starting thread); False: use CDK's own plugin."""
        self._starter.join()
        return self._error is None

    @property
    def start_error(self) -> BaseException | None:
        self._starter.join()
        return self._error

    @property
    def closed(self) -> bool:
        """True once the worker was closed, by `close()` or after a failure."""
        self._starter.join()
        return self._worker is None

    def _ask(self, request: object) -> tuple[_Worker, Any]:
        if not self.ready() or self._worker is None:
            raise MlstackError(f"the template validation worker is not running: {self._error}")
        self._worker.send(request)
        return self._worker, self._worker.receive()

    def validate(self, stacks: Sequence[Stack]) -> list[list[dict[str, Any]]]:
        """The diagnostics of each stack's template, in the order given. A failure ends the worker."""
        with self._lock:
            worker, reply = self._ask([dict(stack) for stack in stacks])
            if not isinstance(reply, list) or len(reply) != len(stacks):
                self._fail(worker)
            return reply

    def version(self) -> str:
        """The engine core's version (what CDK's plugin reports as its own)."""
        with self._lock:
            if self._version is None:
                worker, reply = self._ask({"version": True})
                if not isinstance(reply, dict) or not isinstance(reply.get("version"), str):
                    self._fail(worker)
                self._version = reply["version"]
            return self._version

    def _fail(self, worker: _Worker) -> NoReturn:
        text = worker.failure()
        worker.stderr.close()
        self._worker = None
        self._error = MlstackError(f"it failed: {text}")
        raise MlstackError(f"template validation failed: {text}")

    def close(self) -> None:
        self._starter.join()
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker.stderr.close()
                self._worker = None
                self._error = self._error or MlstackError("it was closed")
        self._files.close()


_running: ValidationWorker | None = None
_running_lock = threading.Lock()


def start_worker(environ: Mapping[str, str] = os.environ) -> ValidationWorker:
    """The process's worker, started on the first call (the engine's start is paid once per process, like CDK's
    singleton plugin) and again after it failed or was closed; closed at exit."""
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
