"""The example pipeline's scripts, run end to end on CPU in the SageMaker directory layout (a temporary /opt/ml)."""

from __future__ import annotations

import csv
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runtime.mlops import evaluate, preprocess, train


def test_preprocess_train_evaluate_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    processing = tmp_path / "processing"
    preprocess.main(["--base-dir", str(processing), "--rows", "400"])
    assert {p.name for p in processing.iterdir()} == {"train", "validation", "test"}

    # Training contract: the channel and model directory come from SM_* variables.
    model_dir = tmp_path / "model"
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(processing / "train"))
    monkeypatch.setenv("SM_MODEL_DIR", str(model_dir))
    train.main(["--epochs", "60"])
    assert (model_dir / "model.json").exists()
    assert (model_dir / "code" / "inference.py").read_text() == Path(train.__file__).read_text()

    # SageMaker hands the evaluation step the training job's model.tar.gz.
    eval_base = tmp_path / "eval"
    (eval_base / "model").mkdir(parents=True)
    with tarfile.open(eval_base / "model" / "model.tar.gz", "w:gz") as tar:
        tar.add(model_dir / "model.json", arcname="model.json")
    (eval_base / "test").symlink_to(processing / "test", target_is_directory=True)
    (eval_base / "train").symlink_to(processing / "train", target_is_directory=True)
    evaluate.main(["--base-dir", str(eval_base)])
    report = json.loads((eval_base / "evaluation" / "evaluation.json").read_text())
    # The path the Condition step reads with Std:JsonGet.
    accuracy = report["metrics"]["accuracy"]["value"]
    assert 0.8 <= accuracy <= 1.0
    assert report["rows"] == 60

    # The data-quality baseline in the captured layout (output_columns_position START): the model's output first.
    baseline = list(csv.reader((eval_base / "baseline" / "baseline.csv").open()))
    assert baseline[0] == ["prediction", "f0", "f1", "f2", "f3"]
    assert len(baseline) == 1 + 280
    model = train.model_fn(str(model_dir))
    first = [float(v) for v in baseline[1]]
    assert 0.0 <= first[0] <= 1.0
    assert first[0] == pytest.approx(train.predict_fn([first[1:]], model)[0], abs=1e-6)


def test_serving_functions_load_the_trained_model(tmp_path: Path) -> None:
    processing = tmp_path / "p"
    preprocess.main(["--base-dir", str(processing), "--rows", "200"])
    train.main(["--train", str(processing / "train"), "--model-dir", str(tmp_path / "m"), "--epochs", "30"])
    model = train.model_fn(str(tmp_path / "m"))
    high, low = train.predict_fn([[2.0, 2.0, 2.0, 2.0], [-2.0, -2.0, -2.0, -2.0]], model)
    assert high > 0.9 > 0.1 > low


class _ArrayLike:
    def __init__(self, value: list[Any]) -> None:
        self.value = value

    def tolist(self) -> list[Any]:
        return self.value


def test_a_multi_row_csv_request_gets_one_probability_per_row(tmp_path: Path) -> None:
    """What the endpoint receives: `invoke-endpoint --content-type text/csv` with one row of features per line."""
    processing = tmp_path / "p"
    preprocess.main(["--base-dir", str(processing), "--rows", "200"])
    train.main(["--train", str(processing / "train"), "--model-dir", str(tmp_path / "m"), "--epochs", "30"])
    model = train.model_fn(str(tmp_path / "m"))
    body = b"2.0,2.0,2.0,2.0\n-2.0,-2.0,-2.0,-2.0\n0.1,0.2,0.3,0.4\n"
    rows = train.input_fn(body, "text/csv")
    assert rows == [[2.0, 2.0, 2.0, 2.0], [-2.0, -2.0, -2.0, -2.0], [0.1, 0.2, 0.3, 0.4]]
    high, low, _ = train.predict_fn(rows, model)
    assert high > 0.9 > 0.1 > low
    assert len(train.predict_fn(train.input_fn("1,1,1,1", "text/csv; charset=utf-8"), model)) == 1
    # A container's own CSV decoder hands over a NumPy array or a tensor (2-D for several rows, 1-D for one):
    # anything with tolist().
    assert len(train.predict_fn(_ArrayLike(rows), model)) == 3
    assert len(train.predict_fn(_ArrayLike(rows[0]), model)) == 1
    with pytest.raises(ValueError, match="send text/csv"):
        train.input_fn(b"{}", "application/json")
    with pytest.raises(ValueError, match="the model takes 4"):
        train.predict_fn([[1.0, 2.0]], model)


def test_preprocess_reads_given_csv_instead_of_generating(tmp_path: Path) -> None:
    data = tmp_path / "input" / "data"
    data.mkdir(parents=True)
    (data / "mine.csv").write_text("".join(f"{i % 2},{i},{-i}\n" for i in range(20)))
    preprocess.main(["--base-dir", str(tmp_path)])
    rows = sum(len((tmp_path / s / f"{s}.csv").read_text().splitlines()) for s in ("train", "validation", "test"))
    assert rows == 20


def test_evaluate_fails_loudly_without_test_rows(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.json").write_text(json.dumps({"weights": [1.0], "bias": 0.0}))
    (tmp_path / "test").mkdir()
    with pytest.raises(SystemExit, match="no test rows"):
        evaluate.main(["--base-dir", str(tmp_path)])
