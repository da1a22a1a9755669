"""The local deploy driver: its server never outlives it, whatever fails; what it hands the CLI.

Fast (no `cdk` run): the full create/update/no-change deploy is `make test-deploy-local`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlstack import local_deploy
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.local_deploy import DeployError, _listening, cli_env, free_port, moto_server
from mlstack.local_moto import modelled


def _gone(process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is None:
        return False
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Every server process the driver stops, recorded."""
    seen: list[subprocess.Popen[bytes]] = []
    real_stop = local_deploy.stop

    def record(process: subprocess.Popen[bytes]) -> None:
        seen.append(process)
        real_stop(process)

    monkeypatch.setattr(local_deploy, "stop", record)
    return seen


def test_server_is_stopped_when_the_deploy_fails(tmp_path: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    with pytest.raises(DeployError, match="failed with exit code 1"):
        # `false` stands in for a CLI whose bootstrap fails, after the real moto server came up.
        local_deploy.local_deploy("inference-serverless", port=port, workdir=tmp_path, cdk=("false",))
    (server,) = stopped
    assert _gone(server)
    assert not _listening(port)
    assert "moto listening" in (tmp_path / "moto.log").read_text()


def test_server_is_stopped_on_interrupt(tmp_path: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    listener = [
        sys.executable,
        "-c",
        f"import socket,time; s=socket.create_server(('127.0.0.1', {port})); time.sleep(60)",
    ]
    with pytest.raises(KeyboardInterrupt), moto_server(port, tmp_path / "log", command=listener):
        raise KeyboardInterrupt
    (server,) = stopped
    assert _gone(server)


def test_server_that_never_listens_is_stopped(tmp_path: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    with (
        pytest.raises(DeployError, match="not listening on port"),
        moto_server(free_port(), tmp_path / "log", command=silent, timeout_s=1),
    ):
        pass
    (server,) = stopped
    assert _gone(server)


def test_server_that_exits_early_is_reported(tmp_path: Path) -> None:
    with (
        pytest.raises(DeployError, match="exited with 3"),
        moto_server(free_port(), tmp_path / "log", command=[sys.executable, "-c", "raise SystemExit(3)"]),
    ):
        pass


def test_cli_talks_to_localhost_with_dummy_credentials_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "real-token")
    env = cli_env(4567, "us-west-2")
    # localhost, not 127.0.0.1: moto takes the bucket of a template URL from an IP host name's first label.
    assert env["AWS_ENDPOINT_URL"] == "http://localhost:4567"
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("testing", "testing")
    assert "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env
    assert env["AWS_REGION"] == "us-west-2" and env["AWS_MAX_ATTEMPTS"] == "1"


def test_update_blueprint_keeps_the_name_and_adds_one_tag(tmp_path: Path) -> None:
    changed = local_deploy.changed_blueprint(BLUEPRINTS_DIR / "inference-serverless.yaml", tmp_path)
    original = load(BLUEPRINTS_DIR / "inference-serverless.yaml")
    updated = load(changed)
    assert updated.name == original.name
    assert updated.tags == {**original.tags, "mlstack:local-deploy": "update"}
    assert (
        yaml.safe_load(changed.read_text())["inference"]
        == yaml.safe_load((BLUEPRINTS_DIR / "inference-serverless.yaml").read_text())["inference"]
    )


def test_bad_blueprint_is_one_line_and_starts_no_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert local_deploy.main(["no-such-blueprint"]) == 1
    err = capsys.readouterr()
    assert err.err.startswith("error: ") and "no such blueprint file" in err.err
    assert "moto server" not in err.out


def test_types_moto_models_and_placeholders() -> None:
    assert modelled("AWS::EC2::VPC") and modelled("AWS::SageMaker::Endpoint")
    assert not modelled("AWS::EKS::Cluster") and not modelled("AWS::FSx::FileSystem")
    assert not modelled("Custom::VpcRestrictDefaultSG")  # moto would run its Lambda in Docker
