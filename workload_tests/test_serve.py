"""OpenVINO int8 serving: conversion accuracy on a held-out split, and the SageMaker container contract."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from runtime.workloads.serve import convert, server


@pytest.fixture(scope="module")
def digits() -> convert.Digits:
    return convert.digits()


@pytest.fixture(scope="module")
def models(digits: convert.Digits) -> dict[str, ov.Model]:
    fp32 = convert.to_openvino(convert.train_digits(digits), digits.x_train.shape[1])
    return {"fp32": fp32, "int8": convert.quantize_int8(fp32, digits.x_train)}


def test_int8_is_really_quantized_and_within_one_percent_of_fp32_on_held_out_digits(
    digits: convert.Digits, models: dict[str, ov.Model]
) -> None:
    ops = {op.get_type_name() for op in models["int8"].get_ops()}
    assert "FakeQuantize" in ops  # NNCF inserted int8 quantize/dequantize pairs
    acc = {k: convert.accuracy(convert.compile_cpu(m), digits.x_test, digits.y_test) for k, m in models.items()}
    assert len(digits.y_test) == 540  # 30% of scikit-learn's 1,797 digits, never used for training or calibration
    assert acc["fp32"] > 0.95
    assert abs(acc["fp32"] - acc["int8"]) <= 0.01, acc


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, models: dict[str, ov.Model]) -> Iterator[str]:
    model_dir = tmp_path_factory.mktemp("model")
    ov.save_model(models["int8"], model_dir / "model.xml")
    httpd = server.serve(model_dir, 0, host="127.0.0.1")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _post(url: str, body: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{url}/invocations", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_ping_answers_200(url: str) -> None:
    with urllib.request.urlopen(f"{url}/ping", timeout=10) as resp:
        assert resp.status == 200


def test_invocations_json_and_csv_give_the_same_correct_predictions(url: str, digits: convert.Digits) -> None:
    x, y = digits.x_test[:20], digits.y_test[:20]
    status, out = _post(url, json.dumps({"instances": x.tolist()}).encode(), "application/json")
    assert status == 200 and len(out["predictions"]) == 20 and len(out["outputs"][0]) == 10
    assert np.mean(np.array(out["predictions"]) == y) >= 0.9
    csv = "\n".join(",".join(str(v) for v in row) for row in x.tolist()).encode()
    status, out_csv = _post(url, csv, "text/csv")
    assert status == 200 and out_csv["predictions"] == out["predictions"]


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b'{"instances": [[1, 2]]}', "application/json", "each row needs 64 features, got 2"),
        (b'{"rows": []}', "application/json", "cannot read the request body"),
        (b"1,2\n3", "text/csv", "cannot read the request body as text/csv"),
        (b'{"instances": [1, 2]}', "application/json", "expected a non-empty 2-D batch"),
        (b"x", "application/x-npy", "unsupported content type"),
    ],
)
def test_bad_requests_get_400_with_the_reason(url: str, body: bytes, content_type: str, message: str) -> None:
    status, out = _post(url, body, content_type)
    assert status == 400 and message in out["error"]


def test_unknown_route_is_404(url: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{url}/health", timeout=10)
    assert err.value.code == 404


def test_convert_cli_writes_both_irs(tmp_path: Path) -> None:
    assert convert.main(["--out", str(tmp_path), "--epochs", "1", "--calibration-samples", "20"]) == 0
    assert (tmp_path / "fp32" / "model.xml").exists() and (tmp_path / "int8" / "model.bin").exists()
