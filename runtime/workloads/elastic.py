"""torchrun whose exit code tells an application error from an infrastructure failure.

    python elastic.py --nnodes=2 --nproc-per-node=8 --max-restarts=0 ... train.py [train.py arguments]

The arguments are torchrun's (`torch.distributed.run`); the launch is torchrun's own (`torch.distributed.run.run`).
Only the exit code differs: torchrun itself exits 1 whatever its workers did (its entry point re-raises the
ChildFailedError), so a job policy cannot tell a bug from a lost node. This launcher exits with `APP_ERROR_EXIT`
when any failed worker exited with it (train.py's code for an error of the script), otherwise with 1 (a worker
killed, a peer or the network lost: restart and resume). Restarts inside one launch (`--max-restarts`) are
torchrun's, as before. A SIGTERM to the launcher (the pod's, on a drain) reaches the workers through torchrun,
which waits --shutdown-timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT) seconds for them to checkpoint and exit; the
launcher then exits with 1 too (restart and resume).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `runtime.workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

APP_ERROR_EXIT = 42
"""Exit code of an application error (runtime/workloads/train.py exits with it for an exception that is not a
failure of torch.distributed: a bug, bad arguments or data). 42 is the non-retriable code of the Kubernetes docs'
pod failure policy example ("Handling retriable and non-retriable pod failures with Pod failure policy"); the job
policies mlstack renders fail the job on it instead of restarting."""
RETRY_EXIT = 1


def exit_code(worker_exit_codes: list[int]) -> int:
    """The launcher's exit code for the exit codes of the failed workers (negative: killed by that signal)."""
    return APP_ERROR_EXIT if APP_ERROR_EXIT in worker_exit_codes else RETRY_EXIT


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))
    except ChildFailedError as e:
        codes = [failure.exitcode for failure in e.failures.values()]
        print(f"[elastic] workers failed with exit codes {codes}", file=sys.stderr, flush=True)
        return exit_code(codes)
    except SignalException as e:  # the workers had their shutdown timeout to checkpoint (train.py on SIGTERM)
        print(f"[elastic] stopped by signal {e.sigval}: restart and resume", file=sys.stderr, flush=True)
        return RETRY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
