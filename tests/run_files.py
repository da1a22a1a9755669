"""A background checker's end, as files: the process that started the run (the session synth,
`tests/session_synth.py`) writes its exit status and seconds next to its output file when it ends, and the test
processes that read the report (pytest-xdist workers, or the one pytest process) wait for that file instead of
holding the process."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

POLL_S = 0.1


def end_file(out: Path) -> Path:
    """`<out>.end`: `{"code": <exit status>, "seconds": <wall>}` once the run has ended."""
    return out.with_name(out.name + ".end")


def record_end(out: Path, code: int, seconds: float) -> None:
    partial = out.with_name(out.name + ".end.partial")
    partial.write_text(json.dumps({"code": code, "seconds": round(seconds, 1)}), encoding="utf-8")
    partial.replace(end_file(out))  # a reader never sees half a file


def wait_for_end(out: Path, timeout_s: float) -> tuple[int, float]:
    """(exit status, seconds) of the run writing `out`, once it has ended; TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    path = end_file(out)
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{out.name}: no end after {timeout_s:.0f} s (see {out})")
        time.sleep(POLL_S)
    end = json.loads(path.read_text(encoding="utf-8"))
    return int(end["code"]), float(end["seconds"])


def wait_and_record(runs: dict[Path, tuple[subprocess.Popen[bytes], float]], timeout_s: float) -> None:
    """Wait for every run (output file -> (process, its monotonic start)), recording each one's end as soon as it
    comes, so a reader of a quick run does not wait for the slowest; a run past `timeout_s` is killed and recorded
    with the status the kill gave it."""
    pending = dict(runs)
    while pending:
        for out, (process, started) in list(pending.items()):
            code = process.poll()
            if code is None and time.monotonic() > started + timeout_s:
                process.kill()
                code = process.wait()
            if code is not None:
                record_end(out, code, time.monotonic() - started)
                del pending[out]
        if pending:
            time.sleep(POLL_S)
