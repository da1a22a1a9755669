"""Run train.py under torchrun on this machine (tests and bench): N CPU processes over gloo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TRAIN = Path(__file__).resolve().parent / "train.py"


def torchrun(metrics: Path, *args: str, nproc: int = 2, timeout: float = 600) -> list[dict[str, Any]]:
    """Rank 0's per-step records; raises RuntimeError with the log tail when the run fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        str(TRAIN), "--metrics-file", str(metrics), *args,
    ]  # fmt: skip
    # Own process group: on a timeout the ranks are killed with torchrun, not left orphaned holding the CPU.
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: torchrun starts the ranks in sessions of their own and only it can stop them (a SIGKILL'd
        # torchrun left a hung rank running); SIGKILL if it has not exited in 30 s.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        raise RuntimeError(f"{' '.join(cmd)} timed out after {timeout}s:\n{stdout[-3000:]}\n{stderr[-3000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return [json.loads(line) for line in metrics.read_text().splitlines()]
