"""`mlstack advise | memory | catalog`: output shapes and every error path (one line on stderr, exit 2)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlstack.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    """stderr lines written by mlstack (jsii/Node may add its own banner when other commands import CDK)."""
    return [line for line in err.splitlines() if line.startswith(("error:", "usage:", "mlstack"))]


# ------------------------------------------------------------------------------------------------ happy paths


def test_memory_json_paper_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "memory", "--params", "7.5e9", "--gpus", "64", "--zero", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["bytes_per_device"] == {
        "parameters": 234375000.0,
        "gradients": 234375000.0,
        "optimizer_states": 1406250000.0,
        "total": 1875000000.0,
    }
    assert data["gb_per_device"]["total"] == pytest.approx(1.875)


def test_memory_fsdp_and_activations_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "memory", "--params", "7.5e9", "--gpus", "64", "--fsdp", "SHARD_GRAD_OP", "--seq-len", "4096"
    )
    assert code == 0
    assert "ZeRO-2 (FSDP SHARD_GRAD_OP)" in out
    assert "16.641" in out  # total GB at ZeRO-2
    assert "activations (full)" in out


def test_memory_json_with_activations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "memory",
        "--params",
        "1e9",
        "--seq-len",
        "2048",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--checkpointing",
        "none",
        "--json",
    )
    assert code == 0
    acts = json.loads(out)["activations"]
    assert acts["bytes_per_device"] == 32 * 956_301_312


def test_advise_train_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "advise", "--task", "train", "--params", "70e9", "--tokens", "1e12")
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#"))
    assert "est. time" in lines[header] and "EFA Gbps/node" in lines[header]
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    assert "p5.48xlarge" in out and "options cut" in out
    # aligned: every row of the table starts its instance column at the same offset
    col = lines[header].index("instance")
    rows = lines[header + 2 : header + 7]
    assert all(r[col - 1] == " " and r[col] != " " for r in rows)


def test_advise_all_shows_cut_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "advise", "--task", "train", "--params", "70e9", "--all")
    assert code == 0
    assert "cut: no EFA for multi-node" in out and "cut: Inferentia" in out


def test_advise_infer_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "advise", "--task", "infer", "--params", "7e9", "--context", "8192", "--concurrency", "16", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["task"] == "infer" and data["inputs"]["context"] == 8192
    assert data["chosen"][0]["reason"].startswith("fits")
    assert {"instance_type", "nodes", "accelerators", "efa_gbps_per_node", "price_per_hour", "reason"} <= set(
        data["chosen"][0]
    )


def test_advise_train_table_shows_layout_time_source_and_prices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "advise", "--task", "train", "--params", "405e9", "--tokens", "15.6e12", "--pricing", "capacity_block"
    )
    assert code == 0
    header = next(line for line in out.splitlines() if line.lstrip().startswith("#"))
    for column in ("layout", "est. time (range)", "est. $", "time assumption", "price date"):
        assert column in header
    row = next(line for line in out.splitlines() if " p5.48xlarge " in line)
    assert "TP4 x PP16 x DP2" in row and "MFU 39% (range 30%-50%) near llama3-405b-h100-16k" in row
    assert "9,953 d (7,656-12,939)" in row  # the point and its range: x/÷ 1.3
    assert "arXiv:2407.21783" in out  # the published run behind the time
    assert "prices: oldest price date used 2024-12-31 (p5.48xlarge, capacity_block)" in out
    assert "no price known (not estimated):" in out


def test_advise_render_warns_on_stale_prices() -> None:
    from mlstack.catalog.advise_cli import render_advice
    from mlstack.catalog.advisor import advise_train

    advice = advise_train(70e9, tokens=1e12)
    # the day is passed in: on-demand rows are dated 2026-01-21, the Capacity Block rates 2024-12-31
    early = render_advice(advice, top=3, show_cut=False, today=dt.date(2025, 2, 1))
    assert "older than 90 days" not in early
    late = render_advice(advice, top=3, show_cut=False, today=dt.date(2026, 12, 1))
    (warning,) = [line for line in late.splitlines() if "warning: prices older than 90 days:" in line]
    assert "trn1.32xlarge" in warning and "p5.48xlarge" in warning
    assert "p5e.48xlarge" not in warning  # unpriced types are listed apart, under "no price known"


def test_advise_train_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "advise", "--task", "train", "--params", "70e9", "--tokens", "1e12", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"oldest_price_date", "unpriced", "chosen", "cut", "assumptions", "inputs"} <= set(data)
    first = data["chosen"][0]
    assert {"layout", "utilisation", "price_date", "price_service", "est_hours", "est_cost"} <= set(first)
    assert {"tp", "pp", "dp", "comm_bytes_per_step_per_device", "step_seconds"} <= set(first["layout"])
    assert {"row", "mfu", "mfu_low", "mfu_high", "source", "source_date"} <= set(first["utilisation"])
    assert "p5e.48xlarge" in data["unpriced"] and data["inputs"]["pricing"] == "ec2_on_demand"
    assert "p5.48xlarge" not in data["unpriced"]  # dated post-June-2025 rate


def test_advise_budget_can_leave_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "advise", "--task", "train", "--params", "405e9", "--budget-per-hour", "1")
    assert code == 0
    assert "no option fits" in out and "cut: over budget" in out


def test_catalog_list_and_detail(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog")
    assert code == 0 and "p6-b300.48xlarge" in out and "c8g.48xlarge" in out
    code, out, _ = run(capsys, "catalog", "ml.p6-b300.48xlarge")
    assert code == 0
    assert "EFA layout (16 EFA)" in out and "interface" in out
    code, out, _ = run(capsys, "catalog", "trn2.48xlarge", "--json")
    data = json.loads(out)
    assert data["accelerator"]["memory_gib"] == 96.0 and len(data["efa_layout"]) == 16
    code, out, _ = run(capsys, "catalog", "--json")
    assert len(json.loads(out)["instances"]) >= 64


# ------------------------------------------------------------------------------------------------ error paths

ERRORS = [
    (["advise", "--task", "train", "--params=-7e9"], "--params must be positive"),
    (["advise", "--task", "train", "--params", "-7000000000"], "--params must be positive"),
    (["advise", "--task", "train", "--params", "0"], "--params must be positive"),
    (["advise", "--task", "train", "--params", "2e14"], "absurd"),
    (["advise", "--task", "train", "--params", "7e9", "--max-nodes", "0"], "--max-nodes must be at least 1"),
    (["advise", "--task", "train", "--params", "7e9", "--max-nodes", "100000"], "--max-nodes 100000 is out of range"),
    (["advise", "--task", "train", "--params", "7e9", "--budget-per-hour", "-1"], "--budget-per-hour must be positive"),
    (["advise", "--task", "train", "--params", "7e9", "--tokens", "0"], "--tokens"),
    (["advise", "--task", "train", "--params", "7e9", "--zero", "4"], "ZeRO stage must be 0, 1, 2 or 3"),
    (["advise", "--task", "train", "--params", "7e9", "--precision", "int4"], "training precision"),
    (["advise", "--task", "train", "--params", "7e9", "--mfu", "2"], "--mfu"),
    (["advise", "--task", "train", "--params", "7e9", "--headroom", "0.95"], "--headroom"),
    (["advise", "--task", "train", "--params", "7e9", "--context", "8192"], "--context applies to --task infer"),
    (["advise", "--task", "train", "--params", "7e9", "--tpot-ms", "50"], "--tpot-ms applies to --task infer"),
    (["advise", "--task", "infer", "--params", "7e9", "--tpot-ms", "0"], "--tpot-ms must be a positive number"),
    (["advise", "--task", "infer", "--params", "7e9", "--output-tokens", "0"], "--output-tokens must be an integer"),
    (["advise", "--task", "train", "--params", "7e9", "--top", "0"], "--top must be at least 1"),
    (["advise", "--task", "train", "--params", "7e9", "--layers", "32"], "give all of --layers"),
    (
        [
            "advise",
            "--task",
            "train",
            "--params",
            "7e9",
            "--layers",
            "32",
            "--hidden",
            "100",
            "--heads",
            "3",
            "--kv-heads",
            "1",
        ],
        "must divide",
    ),
    (["advise", "--task", "infer", "--params", "7e9", "--context", "0"], "--context must be an integer"),
    (["advise", "--task", "infer", "--params", "7e9", "--concurrency", "-3"], "--concurrency must be an integer"),
    (["advise", "--task", "infer", "--params", "7e9", "--tokens", "1e9"], "--tokens applies to --task train"),
    (["advise", "--task", "infer", "--params", "7e9", "--days", "90"], "--days applies to --task train"),
    (["advise", "--task", "train", "--params", "7e9", "--days", "90"], "--days needs --tokens"),
    (
        ["advise", "--task", "train", "--params", "7e9", "--tokens", "1e12", "--days", "0"],
        "--days must be in (0, 3650]",
    ),
    (["memory", "--params", "7.5e9", "--gpus", "64", "--zero", "4"], "--zero must be 0, 1, 2 or 3"),
    (["memory", "--params=-1", "--gpus", "64"], "parameter count must be positive"),
    (["memory", "--params", "1e15"], "absurd"),
    (["memory", "--params", "7e9", "--gpus", "0"], "device count must be a positive integer"),
    (["memory", "--params", "7e9", "--zero", "1", "--fsdp", "FULL_SHARD"], "--zero or --fsdp, not both"),
    (["memory", "--params", "7e9", "--fsdp", "PARTIAL"], "unknown FSDP sharding strategy"),
    (["memory", "--params", "7e9", "--k", "-1"], "--k must be between 0 and 64"),
    (["memory", "--params", "7e9", "--seq-len", "0"], "sequence length must be a positive integer"),
    (["memory", "--params", "7e9", "--seq-len", "128", "--tp", "0"], "tensor-parallel degree"),
    (["catalog", "p5.24xlarge"], "unknown instance type 'p5.24xlarge'"),
    (["catalog", "ml.nonsense"], "unknown instance type 'ml.nonsense'"),
]


@pytest.mark.parametrize(("argv", "message"), ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_user_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in err


USAGE_ERRORS = [
    ["advise", "--params", "7e9"],  # --task missing
    ["advise", "--task", "train", "--params", "-7e9"],  # argparse reads "-7e9" as an option
    ["advise", "--task", "fly", "--params", "7e9"],
    ["advise", "--task", "train", "--params", "seven"],
    ["advise", "--task", "train", "--params", "nan"],
    ["advise", "--task", "train", "--params", "7e9", "--max-nodes", "1.5"],
    ["memory", "--gpus", "8"],  # --params missing
    ["advise", "--task", "infer", "--params", "7e9", "--precision", "fp4"],
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=[" ".join(a) for a in USAGE_ERRORS])
def test_usage_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "error:" in err and "Traceback" not in err


def test_console_script_prints_one_line_and_no_traceback() -> None:
    script = shutil.which("mlstack", path=str(Path(sys.executable).parent))
    assert script is not None, "the mlstack console script is installed in the venv"
    proc = subprocess.run(
        [script, "memory", "--params", "7.5e9", "--gpus", "64", "--zero", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert error_lines(proc.stderr) == ["error: --zero must be 0, 1, 2 or 3, got 4"]
