"""torchrun whose exit code tells an application error from an infrastructure failure, and which gives its
workers the whole stop window on SIGTERM.

    python elastic.py --nnodes=2 --nproc-per-node=8 --max-restarts=0 ... train.py [train.py arguments]

The arguments are torchrun's (`torch.distributed.run`); the launch is torchrun's own (`torch.distributed.run.run`).
Only the exit code differs: torchrun itself exits 1 whatever its workers did (its entry point re-raises the
ChildFailedError), so a job policy cannot tell a bug from a lost node. This launcher exits with `APP_ERROR_EXIT`
when any failed worker exited with it (train.py's code for an error of the script), otherwise with 1 (a worker
killed, a peer or the network lost: restart and resume). Restarts inside one launch (`--max-restarts`) are
torchrun's, as before.

SIGTERM (the pod's, on a drain or a scale-down; the container's, when AWS Batch stops a job): the launcher
passes it on to every worker itself and waits up to `grace_seconds()` for them to checkpoint and exit, then
SIGKILLs any that are left, and only then lets torchrun shut down (nothing is left for it to wait on); it exits
with 1 (restart and resume). torchrun alone would SIGKILL the workers 30 s after the SIGTERM on the image's torch
2.7.1: its agent closes the workers with PContext.close's fixed 30 s default; the --shutdown-timeout option and
TORCH_ELASTIC_SHUTDOWN_TIMEOUT exist only in later releases (torch/distributed/run.py and
torch/distributed/launcher/api.py of pytorch/pytorch: absent at v2.7.1, read by 2.13).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a file: make `runtime.workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

APP_ERROR_EXIT = 42
"""Exit code of an application error (runtime/workloads/train.py exits with it for an exception that is not a
failure of torch.distributed: a bug, bad arguments or data). 42 is the non-retriable code of the Kubernetes docs'
pod failure policy example ("Handling retriable and non-retriable pod failures with Pod failure policy"); the job
policies mlstack renders fail the job on it instead of restarting."""
RETRY_EXIT = 1
GRACE_ENV = "MLSTACK_STOP_GRACE_S"
"""Seconds the launcher gives its workers between the SIGTERM and a SIGKILL; unset: TORCH_ELASTIC_SHUTDOWN_TIMEOUT
(what the rendered pods set, for a plain torchrun of a version that reads it too), else torchrun's 30."""
TORCH_DEFAULT_S = 30.0


def exit_code(worker_exit_codes: list[int]) -> int:
    """The launcher's exit code for the exit codes of the failed workers (negative: killed by that signal)."""
    return APP_ERROR_EXIT if APP_ERROR_EXIT in worker_exit_codes else RETRY_EXIT


def grace_seconds(environ: Any = os.environ) -> float:
    """The stop window, from `GRACE_ENV`, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s (torchrun's)."""
    for name in (GRACE_ENV, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"):
        value = environ.get(name)
        if value:
            seconds = float(value)
            if seconds < 0:
                raise SystemExit(f"{name}={value}: must be a number of seconds >= 0")
            return seconds
    return TORCH_DEFAULT_S


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent PID, process group) of `pid` from /proc, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def workers(parent: int | None = None) -> list[int]:
    """Live children of `parent` (default: this process) that lead a process group of their own: the workers,
    which torchrun starts each in a new session (SubprocessHandler, start_new_session=True)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == parent and stat[2] == int(entry.name) and stat[0] != "Z":
                found.append(int(entry.name))
    return sorted(found)


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"  # a worker that exited stays a zombie until torchrun reaps it


def stop_workers(grace: float, pids: list[int] | None = None, poll: float = 0.2) -> list[int]:
    """SIGTERM each worker's process group, wait up to `grace` seconds for the workers to exit, SIGKILL the
    groups of those still running; returns those killed. The workers are not reaped here: torchrun does that
    when it shuts down, and reads their exit codes."""
    pids = workers() if pids is None else pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(poll)
    killed = [p for p in pids if _alive(p)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return killed


def hold_stop_window(grace: float) -> bool:
    """Make torchrun's SIGTERM handler wait for the workers first (`stop_workers`); False, with a warning, where
    this torch has no such handler (then torchrun's own timeout applies).

    torchrun's termination handler (torch.distributed.elastic.multiprocessing.api._terminate_process_handler, the
    same name in 2.7.1 and 2.13) raises SignalException in the agent, which then closes the workers with its
    timeout. The handler is installed by name each time the workers start, so replacing the module's function
    makes every (re)start install this one, which stops the workers before calling torch's."""
    from torch.distributed.elastic.multiprocessing import api

    torch_handler = getattr(api, "_terminate_process_handler", None)
    if torch_handler is None:
        print("[elastic] this torch has no _terminate_process_handler: torchrun's own SIGTERM timeout applies",
              file=sys.stderr, flush=True)  # fmt: skip
        return False
    stopping: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            if stopping:  # a second SIGTERM while the workers save: the window already runs
                return
            stopping.append(signum)
            pids = workers()
            print(f"[elastic] SIGTERM: waiting up to {grace:g}s for workers {pids} to checkpoint and exit",
                  file=sys.stderr, flush=True)  # fmt: skip
            killed = stop_workers(grace, pids)
            if killed:
                print(f"[elastic] workers {killed} still running after {grace:g}s: killed",
                      file=sys.stderr, flush=True)  # fmt: skip
        torch_handler(signum, frame)

    api._terminate_process_handler = handler
    return True


def exit_on_sigterm_before_workers() -> None:
    """Exit with `RETRY_EXIT` at once on a SIGTERM that arrives while no worker runs: before torchrun first starts
    its workers (the rendezvous, up to its timeout) it has no SIGTERM handler (PContext.start installs it, at
    torch/distributed/elastic/multiprocessing/api.py in 2.7.1), and the kernel drops a signal without a handler
    sent to a PID namespace's init, which the launcher is in a container: the pod or job would wait out its whole
    grace before the SIGKILL.

    The main thread may be blocked in torch's C++ (the rendezvous store) where no Python signal handler runs, so
    the signal is read from the interpreter's wakeup fd (`signal.set_wakeup_fd`) by a thread of its own. Once the
    workers run, torchrun's handler (`hold_stop_window`) replaces the placeholder below and this thread sees
    workers and does nothing; the wakeup fd stays."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a Python handler: the C one writes the fd
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            if signal.SIGTERM in os.read(read, 64) and not workers():
                print("[elastic] SIGTERM before the workers started: exiting for a restart", file=sys.stderr,
                      flush=True)  # fmt: skip
                os._exit(RETRY_EXIT)

    threading.Thread(target=watch, name="sigterm-before-workers", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    hold_stop_window(grace_seconds())
    exit_on_sigterm_before_workers()
    try:
        run(parse_args(argv))
    except ChildFailedError as e:
        codes = [failure.exitcode for failure in e.failures.values()]
        print(f"[elastic] workers failed with exit codes {codes}", file=sys.stderr, flush=True)
        return exit_code(codes)
    except SignalException as e:  # the workers had the stop window to checkpoint (train.py on SIGTERM)
        print(f"[elastic] stopped by signal {e.sigval}: restart and resume", file=sys.stderr, flush=True)
        return RETRY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
