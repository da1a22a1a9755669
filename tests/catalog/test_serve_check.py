"""`mlstack serve-check` against a stub OpenAI-compatible server started here and stopped by its PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlstack.catalog.serve_check import percentile
from mlstack.cli import main

STUB = Path(__file__).with_name("openai_stub.py")


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(STUB), *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    assert port.isdigit(), f"stub did not start: {port!r}"
    return proc, f"http://127.0.0.1:{port}"


def _stop(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture
def stub() -> Iterator[str]:
    proc, url = _start("--token-delay-ms", "5")
    try:
        yield url
    finally:
        _stop(proc)


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0


def test_smoke_and_sweep(stub: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "check.json"
    argv = [
        "serve-check",
        stub + "/v1",
        "--concurrency",
        "1,4",
        "--requests",
        "4",
        "--max-tokens",
        "20",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"smoke test passed: {stub} serves stub-model" in printed and "TPOT ms p50/p99" in printed
    report = json.loads(out.read_text())
    assert report["model"] == "stub-model" and [lv["concurrency"] for lv in report["levels"]] == [1, 4]
    for level in report["levels"]:
        assert level["failed"] == 0 and level["output_tokens"] == 4 * 20
        assert level["output_tokens_per_s"] > 0
        # the stub spaces tokens 5 ms apart: TPOT is at least that, and nowhere near a second
        assert 4.5 <= level["tpot_ms"]["p50"] < 200
        assert level["ttft_ms"]["p50"] >= 4.5 and level["latency_ms"]["p99"] >= level["latency_ms"]["p50"]
    # four workers finish four requests in about the time one worker needs for one
    one, four = report["levels"]
    assert four["output_tokens_per_s"] > 2 * one["output_tokens_per_s"]


def test_failing_server_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc, url = _start("--fail-chat")
    try:
        code = main(["serve-check", url, "--out", str(tmp_path / "x.json")])
    finally:
        _stop(proc)
    assert code == 2
    err = capsys.readouterr().err
    assert "HTTP 500" in err and "/v1/chat/completions" in err
    assert not (tmp_path / "x.json").exists()


def test_unreachable_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    proc, url = _start()
    _stop(proc)  # the port is free again: nothing listens there
    assert main(["serve-check", url, "--timeout", "5"]) == 2
    assert "cannot connect" in capsys.readouterr().err
    assert main(["serve-check", "localhost:8000"]) == 2
    assert "must start with http://" in capsys.readouterr().err
    assert main(["serve-check", url, "--concurrency", "0"]) == 2
    assert "--concurrency must be" in capsys.readouterr().err
