"""`make bench`: synth time of every blueprint against an empty CDK Python app, measured in the same run.

Both are timed as fresh processes (what `cdk synth` pays: Python start, jsii/node kernel start, synth), with
CDK's template validation and cdk-nag on for the blueprints, as `make synth` runs them. Prints seconds and the
ratio; runs each `--runs` times (default 3) and reports the median and the minimum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EMPTY_APP = """
import sys
import aws_cdk as cdk
cdk.App(outdir=sys.argv[1]).synth()
"""


def _time(cmd: list[str]) -> float:
    with tempfile.TemporaryDirectory() as outdir:
        start = time.perf_counter()
        subprocess.run([*cmd, outdir], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def _counts(outdir: Path) -> list[tuple[str, int, int]]:
    rows = []
    for manifest in sorted(outdir.glob("assembly-*/manifest.json")):
        for artifact in json.loads(manifest.read_text())["artifacts"].values():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            template = manifest.parent / artifact["properties"]["templateFile"]
            resources = len(json.loads(template.read_text())["Resources"])
            rows.append((artifact["displayName"], resources, template.stat().st_size))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    empty_cmd = [sys.executable, "-c", EMPTY_APP]
    all_cmd = [sys.executable, "-m", "mlstack.synth_all"]
    empty = [_time(empty_cmd) for _ in range(runs)]
    blueprints = [_time(all_cmd) for _ in range(runs)]
    with tempfile.TemporaryDirectory() as outdir:
        subprocess.run([*all_cmd, outdir], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        counts = _counts(Path(outdir))

    e_med, b_med = statistics.median(empty), statistics.median(blueprints)
    print(f"runs: {runs} each, fresh process per run (python + jsii kernel + synth)")
    print(f"empty CDK app        median {e_med:6.2f} s   min {min(empty):6.2f} s")
    print(f"all blueprints       median {b_med:6.2f} s   min {min(blueprints):6.2f} s")
    print(f"ratio (median)       {b_med / e_med:6.2f}x   ({len(counts)} stacks, {sum(c[1] for c in counts)} resources)")
    print()
    width = max(len(c[0]) for c in counts)
    for name, resources, size in counts:
        print(f"  {name:<{width}}  {resources:4d} resources  {size / 1024:7.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
