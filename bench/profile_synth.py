"""Where `python -m mlstack.synth_all` spends its time: the Python side (cProfile) and the jsii kernel side.

Every request to the node kernel is timed from its write to the kernel's next message (node's share of the wall
time, including Python callbacks the kernel asks for in between), and aggregated by kind and target: `create
aws-cdk-lib.aws_iam.Role`, `invoke synth`, `callback visit`. The Python table is cProfile's top functions by own
time, without the time spent waiting on node.

    python bench/profile_synth.py [--top 25] [--blueprint eks-gpu-training ...]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _target(request: Any) -> str:
    kind = type(request).__name__.removesuffix("Request")
    for attr in ("fqn", "method", "property", "cookie", "name"):
        value = getattr(request, attr, None)
        if isinstance(value, str):
            return f"{kind} {value}"
    return kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--blueprint", action="append", help="blueprint name (default: all)")
    args = parser.parse_args()

    from jsii._kernel.providers import process

    node_time: dict[str, float] = collections.defaultdict(float)
    node_calls: collections.Counter[str] = collections.Counter()
    callbacks: collections.Counter[str] = collections.Counter()
    original = process._NodeProcess.send

    origin: dict[str, str] = {}  # callback id -> the request whose node work asked for it

    def send(self: Any, request: Any, response_type: Any) -> Any:  # one jsii request, timed
        # A callback's Complete resumes the node work of the request that asked for it: count it there.
        complete = getattr(request, "complete", None)
        key = origin.pop(complete.cbid) if complete is not None else _target(request)
        start = time.perf_counter()
        response: Any = original(self, request, response_type)
        node_time[key] += time.perf_counter() - start
        node_calls[key] += 1
        if type(response).__name__ == "Callback":
            origin[response.cbid] = key
            callbacks[f"{key} <- callback {response.cookie}"] += 1
        return response

    process._NodeProcess.send = send  # type: ignore[method-assign]

    from mlstack.config import BLUEPRINTS_DIR
    from mlstack.synth_all import synthesize_all

    files = [BLUEPRINTS_DIR / f"{b}.yaml" for b in args.blueprint] if args.blueprint else None
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory() as outdir:
        start = time.perf_counter()
        profiler.enable()
        synthesize_all(Path(outdir), files)
        profiler.disable()
        total = time.perf_counter() - start

    waited = sum(node_time.values())
    calls = sum(node_calls.values())
    print(f"synthesize_all: {total:.2f} s wall; waiting on the node kernel {waited:.2f} s in {calls} jsii requests;")
    print(f"Python's own share {total - waited:.2f} s\n")
    print(f"{'node s':>8} {'calls':>7}  jsii request (kind and target), by node time")
    for key, seconds in sorted(node_time.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{seconds:8.3f} {node_calls[key]:7d}  {key}")
    print("\ncallbacks into Python, by the request that made them:")
    for key, count in callbacks.most_common(args.top):
        print(f"{count:7d}  {key}")
    by_kind: dict[str, float] = collections.defaultdict(float)
    for key, seconds in node_time.items():
        by_kind[key.split(" ")[0]] += seconds
    print("\nby kind: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))

    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(args.top + 5)
    print("\nPython (cProfile, own time; readline is the wait on node):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
