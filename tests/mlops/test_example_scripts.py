"""The example pipeline's scripts, run end to end on CPU in the SageMaker directory layout (a temporary /opt/ml)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from runtime.mlops import evaluate, preprocess, train


def test_preprocess_train_evaluate_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    processing = tmp_path / "processing"
    preprocess.main(["--base-dir", str(processing), "--rows", "400"])
    assert {p.name for p in processing.iterdir()} == {"train", "validation", "test", "baseline"}
    baseline = (processing / "baseline" / "baseline.csv").read_text().splitlines()
    assert baseline[0] == "f0,f1,f2,f3"  # header, features only: what the endpoint receives

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
    evaluate.main(["--base-dir", str(eval_base)])
    report = json.loads((eval_base / "evaluation" / "evaluation.json").read_text())
    # The path the Condition step reads with Std:JsonGet.
    accuracy = report["metrics"]["accuracy"]["value"]
    assert 0.8 <= accuracy <= 1.0
    assert report["rows"] == 60


def test_serving_functions_load_the_trained_model(tmp_path: Path) -> None:
    processing = tmp_path / "p"
    preprocess.main(["--base-dir", str(processing), "--rows", "200"])
    train.main(["--train", str(processing / "train"), "--model-dir", str(tmp_path / "m"), "--epochs", "30"])
    model = train.model_fn(str(tmp_path / "m"))
    high, low = train.predict_fn([[2.0, 2.0, 2.0, 2.0], [-2.0, -2.0, -2.0, -2.0]], model)
    assert high > 0.9 > 0.1 > low


def test_preprocess_reads_given_csv_instead_of_generating(tmp_path: Path) -> None:
    data = tmp_path / "input" / "data"
    data.mkdir(parents=True)
    (data / "mine.csv").write_text("".join(f"{i % 2},{i},{-i}\n" for i in range(20)))
    preprocess.main(["--base-dir", str(tmp_path)])
    rows = sum(len((tmp_path / s / f"{s}.csv").read_text().splitlines()) for s in ("train", "validation", "test"))
    assert rows == 20
    assert (tmp_path / "baseline" / "baseline.csv").read_text().splitlines()[0] == "f0,f1"


def test_evaluate_fails_loudly_without_test_rows(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.json").write_text(json.dumps({"weights": [1.0], "bias": 0.0}))
    (tmp_path / "test").mkdir()
    with pytest.raises(SystemExit, match="no test rows"):
        evaluate.main(["--base-dir", str(tmp_path)])
