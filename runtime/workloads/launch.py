"""Run train.py under torchrun on this machine (tests and bench): N CPU processes over gloo."""

from __future__ import annotations

import json
import os
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
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in metrics.read_text().splitlines()]
