"""Every way the host agent installer can fail on a GPU host reports the failure, once, without the agent
(`host_agent_install_failed` by PutMetricData, runtime/host_metrics/install_cloudwatch_agent.sh `report`), and a good
install reports nothing: against a stand-in that records the signed POST (its Authorization compared with botocore's
SigV4 for the same request, time and keys), and against a moto server (CloudWatch's Query API), with an IMDSv2-only
instance-metadata stand-in."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.server import ThreadedMotoServer

from mlstack.constructs.training.host_agent import HOST_AGENT_SCRIPT, user_data_installer
from mlstack.design.host_agent_alarms import INSTALL_FAILED
from tests.training.host_agent_host import VERSION
from tests.training.host_agent_host import host as _host
from tests.training.host_agent_host import run as _run
from tests.training.imds_stand_in import CREDENTIALS, INSTANCE_ID, Post, imds

MONITORING = "https://monitoring.us-east-1.amazonaws.com/"


def _report(posts: list[Post]) -> dict[str, str] | None:
    """The one failure report the stand-in received, its PutMetricData form parsed, or None."""
    if not posts:
        return None
    [post] = posts
    return dict(urllib.parse.parse_qsl(post.body.decode()))


def _botocore_authorization(post: Post) -> str:
    """What botocore's SigV4 signs for the same POST (URL, Content-Type, body), time and keys."""
    request = AWSRequest(
        method="POST", url=MONITORING, data=post.body, headers={"Content-Type": post.headers["Content-Type"]}
    )
    keys = Credentials(CREDENTIALS["AccessKeyId"], CREDENTIALS["SecretAccessKey"], CREDENTIALS["Token"])
    at = datetime.strptime(post.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    with mock.patch("botocore.auth.get_current_datetime", return_value=at):
        SigV4Auth(keys, "monitoring", "us-east-1").add_auth(request)
    assert request.headers["X-Amz-Date"] == post.headers["X-Amz-Date"]
    return str(request.headers["Authorization"])


def _fail_at(tmp_path: Path, breaks: str) -> tuple[Path, dict[str, str], Path]:
    """A GPU host (EFA, Ubuntu) on which `breaks` fails."""
    return _host(tmp_path, gpu=True, deb=True, efa_devices=1, installed=None if breaks in _FETCHING else VERSION)


_FETCHING = ("architecture", "download", "signature", "package")


def _break(tmp_path: Path, env: dict[str, str], step: str) -> None:
    bin_dir, root = Path(env["PATH"]), Path(env["MLSTACK_ROOT"])
    ctl = root / "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"

    def stub(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")

    if step == "architecture":
        stub("uname", "echo s390x")
    elif step == "download":
        curl = bin_dir / "curl"
        curl.write_text(curl.read_text().replace("; true", "; exit 6"))  # could not resolve host
        curl.write_text(curl.read_text().replace("cat >>", "exec cat >>"))
    elif step == "signature":
        stub("gpg", '[[ "$*" == *--verify* ]] && echo "[GNUPG:] BADSIG D58167303B789C72 x"; true')
    elif step == "package":
        stub("dpkg", "exit 2")
    elif step == "configuration":
        (root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json").mkdir(parents=True)
    elif step == "kernel_log":
        stub("systemctl", "exit 1")
    elif step == "agent_start":
        ctl.write_text('#!/bin/bash\n[[ "$*" == "-a status" ]] && echo \'{"status": "stopped"}\'\ntrue\n')
    elif step == "agent_start_ctl":
        ctl.write_text("#!/bin/bash\nexit 1\n")


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ("architecture", "architecture"),
        ("download", "download"),
        ("signature", "signature"),
        ("package", "package"),
        ("configuration", "configuration"),
        ("kernel_log", "kernel_log"),
        ("agent_start", "agent_start"),  # the agent stopped after the ctl started it
        ("agent_start_ctl", "agent_start"),  # the ctl itself failed
    ],
)
def test_every_failure_on_a_gpu_host_is_reported_with_its_step(tmp_path: Path, step: str, reason: str) -> None:
    with imds() as (url, server):
        _, env, _ = _fail_at(tmp_path, step)
        env["MLSTACK_IMDS"] = env["MLSTACK_MONITORING_ENDPOINT"] = url
        _break(tmp_path, env, step)
        result = _run(tmp_path, env, ok=False)
    assert f"step {reason} failed" in result.stdout, result.stdout + result.stderr
    assert f"reported host_agent_install_failed (Reason={reason})" in result.stdout, result.stdout + result.stderr
    form = _report(server.posts)
    assert form is not None, result.stdout + result.stderr
    [post] = server.posts
    assert post.path == "/" and post.headers["Host"] == "monitoring.us-east-1.amazonaws.com"
    assert post.headers["X-Amz-Security-Token"] == CREDENTIALS["Token"]
    assert post.headers["Content-Type"] == "application/x-www-form-urlencoded; charset=utf-8"
    # The session token is signed (curl 7.81's --aws-sigv4 signed host;x-amz-date only), as botocore signs it.
    assert "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token," in post.headers["Authorization"]
    assert post.headers["Authorization"] == _botocore_authorization(post)

    assert form == {
        "Action": "PutMetricData",
        "Version": "2010-08-01",
        "Namespace": "mlstack/hyperpod-slurm-training/hosts",
        "MetricData.member.1.MetricName": INSTALL_FAILED,
        "MetricData.member.1.Value": "1",
        "MetricData.member.1.Unit": "Count",
        "MetricData.member.1.Dimensions.member.1.Name": "InstanceId",
        "MetricData.member.1.Dimensions.member.1.Value": INSTANCE_ID,
        "MetricData.member.1.Dimensions.member.2.Name": "Reason",
        "MetricData.member.1.Dimensions.member.2.Value": reason,
        "MetricData.member.2.MetricName": INSTALL_FAILED,
        "MetricData.member.2.Value": "1",
        "MetricData.member.2.Unit": "Count",
    }
    assert server.without_token == 0  # IMDSv2: the token first


def test_a_gpu_the_driver_does_not_list_is_reported_after_the_wait(tmp_path: Path) -> None:
    """An NVIDIA controller on the PCI bus but no GPU from nvidia-smi (the driver did not load): not a CPU host."""
    with imds() as (url, server):
        _, env, log = _host(tmp_path, gpu=False, deb=True, efa_devices=0, nvidia_pci=True, imds_url=url)
        result = _run(tmp_path, env, ok=False)
    assert "nvidia-smi lists none" in result.stdout
    assert log.read_text().count("nvidia-smi -L") == 1 + 12 + 1  # the check, a minute of waiting, the last look
    report = _report(server.posts)
    assert report is not None and report["MetricData.member.1.Dimensions.member.2.Value"] == "no_gpu"


def test_a_good_install_reports_nothing(tmp_path: Path) -> None:
    with imds() as (url, server):
        _, env, _ = _host(tmp_path, gpu=True, deb=True, efa_devices=1, nvidia_pci=True, imds_url=url)
        _run(tmp_path, env)
        (tmp_path / "kept").mkdir()
        _, env, _ = _host(tmp_path / "kept", gpu=True, deb=True, efa_devices=1, installed=VERSION, imds_url=url)
        _run(tmp_path / "kept", env)
    assert server.posts == []


def test_a_configuration_clash_is_reported_and_the_install_succeeds(tmp_path: Path) -> None:
    """Another agent configuration sets our metrics keys differently: the agent runs with the kernel log only, the
    exit stays 0, and the report gives the reason (HostAgentMissing would otherwise stand without one)."""
    with imds() as (url, server):
        root, env, _ = _host(tmp_path, gpu=True, deb=True, efa_devices=0, installed=VERSION, imds_url=url)
        other = root / "opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.d/file_hyperpod.json"
        other.parent.mkdir(parents=True)
        other.write_text(json.dumps({"metrics": {"namespace": "/aws/sagemaker/Clusters"}}))
        result = _run(tmp_path, env)
    assert "sets namespace differently" in result.stdout
    assert "reported host_agent_install_failed (Reason=configuration_clash)" in result.stdout, result.stdout
    report = _report(server.posts)
    assert report is not None and report["MetricData.member.1.Dimensions.member.2.Value"] == "configuration_clash"


def test_a_report_that_cannot_be_sent_does_not_hide_the_failure(tmp_path: Path) -> None:
    """No instance metadata (nothing listens): the installer still says what failed and exits 1, within seconds."""
    _, env, _ = _fail_at(tmp_path, "package")
    _break(tmp_path, env, "package")
    result = _run(tmp_path, env, ok=False)
    assert "step package failed" in result.stdout and "could not report it" in result.stdout


@pytest.fixture
def cloudwatch() -> Iterator[tuple[str, Any]]:
    """A moto server (CloudWatch, as the installer's report reaches it) and a boto3 client of it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto's backends live in this process, shared by every server: start empty.
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST"))
    try:
        client = boto3.client(
            "cloudwatch",
            region_name="us-east-1",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=CREDENTIALS["AccessKeyId"],
            aws_secret_access_key=CREDENTIALS["SecretAccessKey"],
            aws_session_token=CREDENTIALS["Token"],
        )
        yield f"http://127.0.0.1:{port}", client
    finally:
        server.stop()


def test_a_failure_reaches_cloudwatch(tmp_path: Path, cloudwatch: tuple[str, Any]) -> None:
    """The driver lists no GPU on a GPU host (a path that downloads nothing): the report signs the Query API call
    with the role's credentials from the IMDSv2 stand-in (Host: the regional endpoint), and moto stores both
    datapoints."""
    endpoint, client = cloudwatch
    with imds() as (url, server):
        _, env, _ = _host(tmp_path, gpu=False, deb=True, efa_devices=0, nvidia_pci=True, imds_url=url)
        env["MLSTACK_MONITORING_ENDPOINT"] = endpoint
        result = _run(tmp_path, env, ok=False)
    assert "reported host_agent_install_failed (Reason=no_gpu)" in result.stdout, result.stdout + result.stderr
    assert server.without_token == 0
    namespace = "mlstack/hyperpod-slurm-training/hosts"
    metrics = client.list_metrics(Namespace=namespace, MetricName=INSTALL_FAILED)["Metrics"]
    dimensions = sorted((tuple((d["Name"], d["Value"]) for d in m["Dimensions"]) for m in metrics), key=len)
    assert dimensions == [(), (("InstanceId", INSTANCE_ID), ("Reason", "no_gpu"))]
    now = datetime.now(UTC)

    def sums(dimensions: list[dict[str, str]]) -> list[float]:
        points = client.get_metric_statistics(
            Namespace=namespace,
            MetricName=INSTALL_FAILED,
            Dimensions=dimensions,
            StartTime=now - timedelta(minutes=10),
            EndTime=now + timedelta(minutes=1),
            Period=300,
            Statistics=["Sum"],
        )["Datapoints"]
        return [p["Sum"] for p in points]

    assert sums([{"Name": "InstanceId", "Value": INSTANCE_ID}, {"Name": "Reason", "Value": "no_gpu"}]) == [1.0]
    # Without dimensions moto sums every series of the name (CloudWatch reads the dimensionless one only): 1 + 1.
    assert sums([]) == [2.0]


def test_a_good_install_sends_cloudwatch_nothing(tmp_path: Path, cloudwatch: tuple[str, Any]) -> None:
    endpoint, client = cloudwatch
    with imds() as (url, _):
        _, env, _ = _host(tmp_path, gpu=True, deb=True, efa_devices=0, installed=VERSION, imds_url=url)
        env["MLSTACK_MONITORING_ENDPOINT"] = endpoint
        _run(tmp_path, env)
    assert client.list_metrics(Namespace="mlstack/hyperpod-slurm-training/hosts")["Metrics"] == []


def test_the_user_data_copy_without_comments_behaves_like_the_script(tmp_path: Path) -> None:
    """Batch and EKS user data carry `user_data_installer()` (the script less its comment lines)."""
    script = tmp_path / "installer.sh"
    script.write_text(user_data_installer())
    assert "#" not in "".join(line.split()[0] for line in script.read_text().splitlines()[1:] if line.split())
    with imds() as (url, server):
        (tmp_path / "good").mkdir()
        _, env, log = _host(tmp_path / "good", gpu=True, deb=True, efa_devices=1, imds_url=url)
        _run(tmp_path / "good", env, script=script)
        assert any(c.startswith("ctl -a fetch-config") for c in log.read_text().splitlines())
        assert server.posts == []
        (tmp_path / "bad").mkdir()
        _, env, _ = _fail_at(tmp_path / "bad", "package")
        env["MLSTACK_IMDS"] = env["MLSTACK_MONITORING_ENDPOINT"] = url
        _break(tmp_path / "bad", env, "package")
        _run(tmp_path / "bad", env, ok=False, script=script)
    report = _report(server.posts)
    assert report is not None and report["MetricData.member.1.Dimensions.member.2.Value"] == "package"


def _python(minor: int) -> str | None:
    """A CPython 3.`minor` interpreter on this machine (PATH or pyenv), or None."""
    candidates = [
        shutil.which(f"python3.{minor}"),
        *map(str, Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3")),
    ]
    for found in filter(None, candidates):
        done = subprocess.run([found, "--version"], capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.startswith(f"Python 3.{minor}."):
            return found
    return None


@pytest.mark.parametrize(
    "minor",
    [
        pytest.param(7, id="python3.7-al2"),  # the HyperPod EKS AL2 AMI (deprecated, still released): 3.7
        pytest.param(9, id="python3.9-al2023"),  # Amazon Linux 2023 (EKS, ECS GPU AMI): python3 is 3.9
        pytest.param(10, id="python3.10-ubuntu22.04"),  # the HyperPod DLAMI's Ubuntu 22.04: 3.10
    ],
)
def test_the_report_runs_on_the_hosts_python(tmp_path: Path, minor: int) -> None:
    found = _python(minor)
    if found is None:
        pytest.skip(f"no Python 3.{minor} here")
    with imds() as (url, server):
        _, env, _ = _host(tmp_path, gpu=False, deb=True, efa_devices=0, nvidia_pci=True, imds_url=url)
        python = Path(env["PATH"]) / "python3"
        python.unlink()
        python.symlink_to(found)
        result = _run(tmp_path, env, ok=False)
    assert "reported host_agent_install_failed (Reason=no_gpu)" in result.stdout, result.stdout + result.stderr
    report = _report(server.posts)
    assert report is not None and report["MetricData.member.1.Dimensions.member.2.Value"] == "no_gpu"
    assert server.posts[0].headers["Authorization"] == _botocore_authorization(server.posts[0])


def test_every_python_block_of_the_installer_parses_as_python_3_7() -> None:
    # Runs where no old interpreter is installed (the test above then skips): Python 3.7 syntax for every
    # `python3 - <<'PY'` block and `python3 -c` one-liner the hosts run (the HyperPod EKS AL2 AMI has 3.7).
    import ast
    import re

    script = HOST_AGENT_SCRIPT.read_text()
    blocks = re.findall(r"<<'PY'[^\n]*\n(.*?)\nPY\n", script, re.DOTALL)
    blocks += re.findall(r"python3 -c '([^']*)'", script)
    assert len(blocks) >= 4, len(blocks)
    for block in blocks:
        ast.parse(block, feature_version=(3, 7))
    assert not re.search(r"\w\s*\|=\s*\{", script), "dict |= needs Python 3.9"
