"""Template-validation workers: aws-cdk-lib's own validation engine in Node processes beside the jsii kernel.

CDK validates every template at synth with `@aws/cloudformation-validate`, a WebAssembly engine it bundles. In the
jsii kernel that work is serial with everything else: making the engine (about 0.6 s) and then validating one
template after another (about 30 ms each), while the Python process waits and the machine's second core idles.
Here the same engine runs in worker processes (`validate_worker.cjs`) that start while the blueprints are being
built, so the engine is ready when synth needs it, and the templates are shared out among the workers.

The engine is the one the installed aws-cdk-lib bundles, never a copy of another version: its folder is read out of
aws-cdk-lib's jsii tarball (in the Python package) into a cache keyed by the tarball's SHA-256, once per version.
Where that cannot be done (no writable cache, no `node`) `WorkerPool.start` returns None and the caller registers
CDK's own plugin instead.
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
    target.parent.mkdir(parents=True, exist_ok=True)
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
"""{templatePath, accountId, region}: what a worker validates (CDK's PolicyValidationStack, by its JS names)."""


class WorkerPool:
    """`count` workers, started by a thread of their own so that the caller goes on building meanwhile."""

    def __init__(self, count: int, environ: Mapping[str, str] = os.environ) -> None:
        if count < 1:
            raise ValueError(f"a worker pool needs at least one worker, not {count}")
        self.count = count
        self._environ = dict(environ)
        self._workers: list[_Worker] = []
        self._error: BaseException | None = None
        self._files = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._version: str | None = None
        self._closed = False
        self._starter = threading.Thread(target=self._start, name="mlstack-validation-workers", daemon=True)
        self._starter.start()

    def _start(self) -> None:
        try:
            node = node_executable(self._environ)
            package = engine_package(cdk_tarball(), cache_root(self._environ))
            # The script's path for the pool's life: from a zipped install, as_file's copy is removed on exit.
            script = self._files.enter_context(resources.as_file(resources.files("mlstack") / "validate_worker.cjs"))
            self._workers = [_Worker(node, package, script) for _ in range(self.count)]
        except (OSError, MlstackError, tarfile.TarError) as err:
            self._error = err

    def ready(self) -> bool:
        """Whether the workers started (waits for the starting thread); False: use CDK's own plugin."""
        self._starter.join()
        return self._error is None

    @property
    def start_error(self) -> BaseException | None:
        self._starter.join()
        return self._error

    def validate(self, stacks: Sequence[Stack]) -> list[list[dict[str, Any]]]:
        """The diagnostics of each stack's template, in the order given; with more than one worker, the templates
        are dealt out (`deal`) and the workers validate their shares at the same time."""
        if not self.ready():
            raise MlstackError(f"template validation workers did not start: {self._error}")
        with self._lock:
            shares = deal([_size(stack["templatePath"]) for stack in stacks], len(self._workers))
            busy = [(w, share) for w, share in zip(self._workers, shares, strict=True) if share]
            for worker, share in busy:
                worker.send([dict(stacks[i]) for i in share])
            results: list[list[dict[str, Any]]] = [[] for _ in stacks]
            failed: list[str] = []
            for worker, share in busy:
                reply = worker.receive()
                if not isinstance(reply, list) or len(reply) != len(share):
                    failed.append(worker.failure())
                    continue
                for index, diagnostics in zip(share, reply, strict=True):
                    results[index] = diagnostics
            if failed:
                self._close_workers()
                raise MlstackError(f"template validation failed: {'; '.join(failed)}")
        return results

    def version(self) -> str:
        """The engine core's version (what CDK's plugin reports as its own)."""
        if self._version is None:
            if not self.ready() or not self._workers:
                raise MlstackError(f"template validation workers did not start: {self._error}")
            with self._lock:
                worker = self._workers[0]
                worker.send({"version": True})
                reply = worker.receive()
                if not isinstance(reply, dict) or not isinstance(reply.get("version"), str):
                    raise MlstackError(f"template validation worker failed: {worker.failure()}")
                self._version = reply["version"]
        return self._version

    @property
    def closed(self) -> bool:
        """True once the workers were closed, by `close()` or after a failure."""
        return self._closed

    def close(self) -> None:
        self._starter.join()
        with self._lock:
            self._close_workers()
        self._files.close()

    def _close_workers(self) -> None:
        for worker in self._workers:
            worker.close()
            worker.stderr.close()
        self._workers = []
        self._closed = True
        self._error = self._error or MlstackError("the workers were closed")


def deal(sizes: Sequence[int], workers: int) -> list[list[int]]:
    """The indexes of `sizes` shared out among `workers`: largest first, each to the worker with the fewest bytes so
    far (ties: the first such worker), so every worker's share takes about as long."""
    shares: list[list[int]] = [[] for _ in range(workers)]
    load = [0] * workers
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        least = load.index(min(load))
        shares[least].append(index)
        load[least] += sizes[index]
    return shares


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


_pools: dict[int, WorkerPool] = {}
_pools_lock = threading.Lock()


def start_pool(count: int, environ: Mapping[str, str] = os.environ) -> WorkerPool:
    """The process's pool of `count` workers, started on the first call (the engine's start is paid once per
    process and worker, like CDK's singleton plugin) and again after its workers failed; closed at exit."""
    with _pools_lock:
        pool = _pools.get(count)
        if pool is None or pool.closed:
            pool = _pools[count] = WorkerPool(count, environ)
        return pool


@atexit.register
def close_pools() -> None:
    """End every pool's workers (they would end with this process anyway: their stdin closes)."""
    with _pools_lock:
        while _pools:
            _pools.popitem()[1].close()
