"""`mlstack list | validate | schema | plan`, and bad blueprints through `app.py` / `npx cdk`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mlstack.cli import main
from mlstack.config import BLUEPRINTS_DIR, DEFAULT_BLUEPRINT
from tests.synth import ROOT

BAD = "description: bad\nnetwork:\n  cidr: 10.0.0.0/33\n  nat_gatways: 1\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_blueprint_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "list")
    assert code == 0
    for path in BLUEPRINTS_DIR.glob("*.yaml"):
        assert path.stem in out
    assert f"{DEFAULT_BLUEPRINT} " in out and "(default)" in out


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "list", "--json")
    rows = json.loads(out)
    assert code == 0
    assert {r["name"] for r in rows} == {p.stem for p in BLUEPRINTS_DIR.glob("*.yaml")}
    assert all("NetworkStack" in r["stacks"] and r["description"] for r in rows)


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "validate", DEFAULT_BLUEPRINT)
    assert code == 0 and out.startswith("ok: ")


def test_validate_json_fills_defaults(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "mini.yaml"
    path.write_text("description: minimal\n")
    code, out, _ = _run(capsys, "validate", str(path), "--json")
    data = json.loads(out)
    assert code == 0
    assert data["name"] == "mini" and data["removal"] == "retain" and data["network"]["nat_gateways"] == 1


def test_validate_bad_file_prints_one_line_per_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    code, out, err = _run(capsys, "validate", str(path))
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 2 and all(line.startswith(f"error: {path}: network.") for line in lines)


def test_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "validate", "./nope.yaml")
    assert code == 2 and "no such blueprint file" in err


def test_schema_is_json_schema_rejecting_unknown_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "schema")
    schema = json.loads(out)
    assert code == 0
    assert schema["additionalProperties"] is False
    assert {"name", "description", "network", "env", "removal"} <= set(schema["properties"])
    assert schema["$defs"]["NetworkConfig"]["additionalProperties"] is False


def test_plan_network_costs_and_quotas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan", DEFAULT_BLUEPRINT, "--json")
    plan = json.loads(out)
    assert code == 0
    assert plan["stacks"][0] == "NetworkStack"
    nat = next(c for c in plan["costs"] if c["item"] == "NAT gateway")
    assert nat["per_hour"] == pytest.approx(0.045)
    assert plan["per_month"] == pytest.approx(plan["per_hour"] * 730, rel=1e-3)
    assert any(q["code"] == "L-F678F1CE" for q in plan["quotas"])


def test_plan_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan")
    assert code == 0
    assert "Total (known prices)" in out and "/month" in out and "quota" in out


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{ROOT / 'node_modules' / '.bin'}:{os.environ['PATH']}"}


def test_app_py_reports_a_bad_blueprint_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    env = {**_env(), "CDK_CONTEXT_JSON": json.dumps({"blueprint": str(path)}), "CDK_OUTDIR": str(tmp_path / "out")}
    result = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: {path}: network.cidr:" in result.stderr


def test_mlstack_console_script_reports_errors_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = subprocess.run(
        [str(ROOT / ".venv/bin/mlstack"), "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr and "network.cidr" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [["plan", "--json"], ["list"], ["validate", DEFAULT_BLUEPRINT], ["advise", "--task", "infer", "--params", "7e9"]],
)
def test_guidance_commands_never_start_the_cdk(argv: list[str]) -> None:
    # Offline guidance must not need Node or jsii: a fresh interpreter, then check what got imported.
    code = f"import sys, mlstack.cli; rc = mlstack.cli.main({argv!r}); sys.exit(3 if 'aws_cdk' in sys.modules else rc)"
    result = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-500:]
