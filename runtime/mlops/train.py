"""Training step: logistic regression by gradient descent (standard library only; seconds on one CPU).

SageMaker training contract: data channels in `SM_CHANNEL_<NAME>` (/opt/ml/input/data/<name>), the model goes to
`SM_MODEL_DIR` (/opt/ml/model, uploaded as model.tar.gz), hyperparameters arrive as `--name value` arguments.
The model directory also gets `code/inference.py` (this file), so a serving container that runs
`SAGEMAKER_PROGRAM` from `code/` can load it with `model_fn` / `input_fn` / `predict_fn`.
Python 3.9 and later, without zip(strict=...): the scikit-learn 1.2-1 container runs 3.9
(mlstack/catalog/data/sagemaker_images.yaml).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

Model = dict[str, Any]


def load_rows(folder: Path) -> tuple[list[list[float]], list[float]]:
    features: list[list[float]] = []
    labels: list[float] = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as handle:
            for row in csv.reader(handle):
                if row:
                    labels.append(float(row[0]))
                    features.append([float(v) for v in row[1:]])
    if not features:
        raise SystemExit(f"no CSV rows in {folder}")
    return features, labels


def probability(model: Model, x: list[float]) -> float:
    weights = model["weights"]
    if len(x) != len(weights):
        raise ValueError(f"a row has {len(x)} features; the model takes {len(weights)}")
    z = model["bias"] + sum(w * x[i] for i, w in enumerate(weights))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def fit(features: list[list[float]], labels: list[float], epochs: int, learning_rate: float) -> Model:
    model: Model = {"weights": [0.0] * len(features[0]), "bias": 0.0}
    n = len(features)
    for _ in range(epochs):
        grad_w = [0.0] * len(model["weights"])
        grad_b = 0.0
        for x, y in ((features[j], labels[j]) for j in range(n)):
            error = probability(model, x) - y
            grad_b += error
            for i, v in enumerate(x):
                grad_w[i] += error * v
        model["weights"] = [w - learning_rate * grad_w[i] / n for i, w in enumerate(model["weights"])]
        model["bias"] -= learning_rate * grad_b / n
    return model


def model_fn(model_dir: str) -> Model:
    """Serving: load the model (SageMaker inference toolkit contract)."""
    model: Model = json.loads((Path(model_dir) / "model.json").read_text())
    return model


def input_fn(body: Any, content_type: str) -> list[list[float]]:
    """Serving: a CSV request of one or more rows (features only, no header) -> rows of floats.

    Parsed here rather than by the container's default decoder, so the model sees the same rows whichever serving
    container (scikit-learn, PyTorch) runs it."""
    if content_type.split(";")[0].strip() != "text/csv":
        raise ValueError(f"content type {content_type!r}: send text/csv, one row of features per line")
    text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else str(body)
    return [[float(v) for v in row] for row in csv.reader(io.StringIO(text)) if row]


def predict_fn(data: Any, model: Model) -> list[float]:
    """Serving: one probability per row of features (a list of rows, one row, or a NumPy array or tensor of either)."""
    if hasattr(data, "tolist"):
        data = data.tolist()
    rows = data if isinstance(data, list) and data and isinstance(data[0], (list, tuple)) else [data]
    return [probability(model, [float(v) for v in row]) for row in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--learning-rate", "--learning_rate", type=float, default=0.5)
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN", "/opt/ml/input/data/train"))
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    args = parser.parse_args(argv)
    features, labels = load_rows(Path(args.train))
    model = fit(features, labels, args.epochs, args.learning_rate)
    model_dir = Path(args.model_dir)
    (model_dir / "code").mkdir(parents=True, exist_ok=True)
    (model_dir / "model.json").write_text(json.dumps(model, indent=2) + "\n")
    shutil.copyfile(__file__, model_dir / "code" / "inference.py")
    print(f"trained on {len(labels)} rows; weights {model['weights']}")


if __name__ == "__main__":
    main()
