"""Evaluation step: score the trained model on the test split and write the report the Condition step reads.

Processing contract: the training job's model.tar.gz in /opt/ml/processing/model, the test split in
/opt/ml/processing/test; the report goes to /opt/ml/processing/evaluation/evaluation.json as
`{"metrics": {"accuracy": {"value": ...}}}`; the pipeline reads `metrics.accuracy.value` with `Std:JsonGet`.
With the train split in /opt/ml/processing/train it also writes the data-quality baseline
/opt/ml/processing/baseline/baseline.csv (header; the model's output, then the features).
Standard library only; Python 3.9 and later (the scikit-learn 1.2-1 container).
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


def probability(model: dict[str, Any], features: list[float]) -> float:
    weights = model["weights"]
    if len(features) != len(weights):
        raise SystemExit(f"a row has {len(features)} features; the model takes {len(weights)}")
    z = model["bias"] + sum(w * features[i] for i, w in enumerate(weights))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def labelled_rows(folder: Path) -> list[tuple[float, list[float]]]:
    """(label, features) of every CSV row in `folder`."""
    found: list[tuple[float, list[float]]] = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as handle:
            found += [(float(row[0]), [float(v) for v in row[1:]]) for row in csv.reader(handle) if row]
    return found


def accuracy(model: dict[str, Any], test_dir: Path) -> tuple[float, int]:
    scored = labelled_rows(test_dir)
    if not scored:
        raise SystemExit(f"no test rows in {test_dir}")
    correct = sum((1.0 if probability(model, x) >= 0.5 else 0.0) == label for label, x in scored)
    return correct / len(scored), len(scored)


def write_baseline(model: dict[str, Any], train_dir: Path, out: Path) -> int:
    """The data-quality baseline in the endpoint's captured layout: the model's output first, then the features.

    Data capture records the request (features) and the response (one probability per row); the monitoring job
    puts the output columns first (`output_columns_position: START`), so the baseline does too."""
    scored = labelled_rows(train_dir)
    if not scored:
        raise SystemExit(f"no training rows in {train_dir}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prediction", *(f"f{i}" for i in range(len(scored[0][1])))])
        writer.writerows([round(probability(model, x), 6), *x] for _, x in scored)
    return len(scored)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-dir", default="/opt/ml/processing")
    args = parser.parse_args(argv)
    base = Path(args.base_dir)
    model = load_model(base / "model")
    value, count = accuracy(model, base / "test")
    report = {"metrics": {"accuracy": {"value": round(value, 4)}}, "rows": count}
    out = base / "evaluation" / "evaluation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    if (base / "train").is_dir():
        written = write_baseline(model, base / "train", base / "baseline" / "baseline.csv")
        print(f"baseline: {written} rows (prediction, then features)")


if __name__ == "__main__":
    main()
