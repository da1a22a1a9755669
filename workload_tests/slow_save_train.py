"""train.py whose SIGTERM checkpoint takes `SLOW_SAVE_S` seconds longer (a sleep before the save ends the step that
the signal stopped): a model whose last save needs more than torchrun's 30 s, for the SIGTERM drill."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.workloads import train

_save = train.save


def slow_save(args: Any, model: Any, optimizer: Any, hook_state: Any, step: int) -> None:
    if train._STOP:  # only the save that SIGTERM asked for
        time.sleep(float(os.environ["SLOW_SAVE_S"]))
    _save(args, model, optimizer, hook_state, step)


train.save = slow_save

if __name__ == "__main__":
    train._exit_without_teardown(train.main())
