"""Run a Python console script with fewer passes of the cycle collector: `PYTHON tests/gc_tuned.py SCRIPT ARG...`
runs SCRIPT as `SCRIPT ARG...` would (as `__main__`, its path as argv[0], its folder first on sys.path), with a
young-generation pass every 20,000 allocations instead of Python's 700.

For the background checkers (tests/blueprints/gate_runs.py): cfn-lint and checkov allocate millions of
short-lived objects, and with the default threshold each young pass, and every tenth older one, also walks
everything they hold. Over the 46 shipped templates, 2 runs each: cfn-lint's collector time 1.9 -> 1.1 s (3,347 ->
111 passes), checkov's 4.9-5.2 -> 1.6-1.9 s (6,130 -> 142 passes). What they report is unchanged: the collector
only frees cycles, and later. mypy tunes its own collector (mypy/build.py). Standard library only: it runs under
checkov's own venv too.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # First, before another import: sys.path[0] is this file's folder (tests/) until then, and a module there could
    # shadow one of the standard library's. The script's folder, as Python sets it for a script (links resolved).
    sys.path[0] = os.path.dirname(os.path.realpath(sys.argv[1]))  # noqa: PTH120

import gc
import runpy

THRESHOLD = 20_000


def main() -> None:
    script = os.path.abspath(sys.argv[1])  # noqa: PTH100 (as __file__ is for a script run alone)
    sys.argv = sys.argv[1:]
    gc.set_threshold(THRESHOLD, *gc.get_threshold()[1:])
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
