"""Evaluation step: score the trained model on the test split and write the report the Condition step reads.

Processing contract: the training job's model.tar.gz in /opt/ml/processing/model, the test split in
/opt/ml/processing/test; the report goes to /opt/ml/processing/evaluation/evaluation.json as
`{"metrics": {"accuracy": {"value": ...}}}`; the pipeline reads `metrics.accuracy.value` with `Std:JsonGet`.
Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import tarfile
from pathlib import Path
from typing import Any


def load_model(folder: Path) -> dict[str, Any]:
    archive = folder / "model.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            member = tar.extractfile("model.json")
            if member is None:
                raise SystemExit(f"{archive} has no model.json")
            model: dict[str, Any] = json.load(member)
            return model
    loaded: dict[str, Any] = json.loads((folder / "model.json").read_text())
    return loaded


def accuracy(model: dict[str, Any], test_dir: Path) -> tuple[float, int]:
    correct = total = 0
    for path in sorted(test_dir.glob("*.csv")):
        with path.open(newline="") as handle:
            for row in csv.reader(handle):
                if not row:
                    continue
                label, features = float(row[0]), [float(v) for v in row[1:]]
                z = model["bias"] + sum(w * v for w, v in zip(model["weights"], features, strict=True))
                predicted = 1.0 if 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z)))) >= 0.5 else 0.0
                correct += predicted == label
                total += 1
    if total == 0:
        raise SystemExit(f"no test rows in {test_dir}")
    return correct / total, total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-dir", default="/opt/ml/processing")
    args = parser.parse_args(argv)
    base = Path(args.base_dir)
    value, rows = accuracy(load_model(base / "model"), base / "test")
    report = {"metrics": {"accuracy": {"value": round(value, 4)}}, "rows": rows}
    out = base / "evaluation" / "evaluation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
