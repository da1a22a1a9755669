"""Processing step: make (or read) a tabular data set and split it into train, validation and test.

SageMaker processing contract: inputs under /opt/ml/processing/input/, outputs under /opt/ml/processing/<name>/
(uploaded to S3 when the job ends). With no CSV in /opt/ml/processing/input/data, a seeded synthetic two-class
data set is generated, so the example pipeline runs without any data upload. CSV rows are `label,f1,...,fN`, no
header (evaluate.py writes the data-quality baseline, with the trained model's output first).
Standard library only; Python 3.9 and later (the scikit-learn 1.2-1 container).
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

Row = list[float]


def synthetic(rows: int, features: int, seed: int) -> list[Row]:
    """Two Gaussian blobs, linearly separable with some overlap: label first, then the features."""
    rng = random.Random(seed)
    data: list[Row] = []
    for _ in range(rows):
        label = rng.randint(0, 1)
        centre = 1.0 if label else -1.0
        data.append([float(label), *(rng.gauss(centre, 1.0) for _ in range(features))])
    return data


def read_csvs(folder: Path) -> list[Row]:
    rows: list[Row] = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as handle:
            rows += [[float(v) for v in row] for row in csv.reader(handle) if row]
    return rows


def write(path: Path, rows: list[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-dir", default="/opt/ml/processing")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    base = Path(args.base_dir)
    rows = read_csvs(base / "input" / "data") or synthetic(args.rows, args.features, args.seed)
    random.Random(args.seed).shuffle(rows)
    n = len(rows)
    train, validation, test = rows[: n * 7 // 10], rows[n * 7 // 10 : n * 85 // 100], rows[n * 85 // 100 :]
    write(base / "train" / "train.csv", train)
    write(base / "validation" / "validation.csv", validation)
    write(base / "test" / "test.csv", test)
    print(f"rows: train {len(train)}, validation {len(validation)}, test {len(test)}")


if __name__ == "__main__":
    main()
