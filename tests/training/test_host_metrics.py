"""Per-GPU and EFA metrics on the engines whose hosts are ours (batch, hyperpod-slurm): the CloudWatch agent's
configuration (checked against the agent's own JSON schema), the script that installs it (run with stand-ins for
the package tools, systemd and nvidia-smi), the user data and lifecycle wiring, the instance roles' exact
statements, and the alarms on what the agent publishes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import load
from mlstack.constructs.training.host_agent import HOST_AGENT_SCRIPT
from mlstack.design.host_metrics import EFA_COUNTERS, GPU_FIELDS, agent_config
from mlstack.design.observability import observability_design
from tests.synth import ROOT, Session

AGENT_VERSION = "1.300071.0"
SCHEMA_URL = (
    f"https://raw.githubusercontent.com/aws/amazon-cloudwatch-agent/v{AGENT_VERSION}/translator/config/schema.json"
)
HOSTS = ("batch-training", "hyperpod-slurm-training")


def _agent_schema() -> dict[str, Any]:
    """The agent's configuration schema at a release tag, from a cache directory (fetched once; skipped offline)."""
    cache = Path(os.environ.get("MLSTACK_SCHEMA_CACHE", Path.home() / ".cache" / "mlstack"))
    path = cache / f"cloudwatch-agent-{AGENT_VERSION}" / "schema.json"
    if not path.exists():
        try:
            with urllib.request.urlopen(SCHEMA_URL, timeout=20) as response:
                body = response.read()
        except OSError as err:
            pytest.skip(f"agent schema not cached at {path} and not fetchable ({err}); fetch {SCHEMA_URL} there")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("name", HOSTS)
def test_agent_config_validates_against_the_agents_schema(name: str) -> None:
    import jsonschema

    config = load(name)
    assert config.training is not None
    rendered = agent_config(config, config.training)
    jsonschema.Draft4Validator(_agent_schema()).validate(rendered)
    # What the schema requires is checked (so the check is not vacuous): the efa section needs its measurements.
    broken = json.loads(json.dumps(rendered))
    del broken["metrics"]["metrics_collected"]["efa"]["measurement"]
    with pytest.raises(jsonschema.ValidationError, match="measurement"):
        jsonschema.Draft4Validator(_agent_schema()).validate(broken)


def test_agent_config_publishes_per_gpu_and_cluster_series_to_the_blueprints_namespace() -> None:
    config = load("batch-training")
    assert config.training is not None
    rendered = agent_config(config, config.training)
    metrics = rendered["metrics"]
    assert isinstance(metrics, dict)
    assert metrics["namespace"] == "mlstack/batch-training/hosts"
    assert metrics["aggregation_dimensions"] == [[], ["host"]]  # [] = the cluster-wide series the alarms read
    collected = metrics["metrics_collected"]
    assert collected["nvidia_gpu"]["measurement"] == list(GPU_FIELDS)
    assert collected["efa"]["measurement"] == list(EFA_COUNTERS)
    # 32 EFA devices per p5 node: only the rolled-up series are published.
    assert collected["efa"]["drop_original_metrics"] == list(EFA_COUNTERS)
    files = rendered["logs"]["logs_collected"]["files"]["collect_list"]  # type: ignore[index]
    assert files == [
        {
            "file_path": "/var/log/mlstack/kernel.log",
            "log_group_name": "/mlstack/batch-training/host-kernel",
            "log_stream_name": "{hostname}",
            "timezone": "UTC",
        }
    ]
    assert rendered["agent"] == {"region": "us-east-1", "metrics_collection_interval": 60}


@pytest.mark.parametrize("name", HOSTS)
def test_alarms_read_the_agents_cluster_series_by_their_published_names(name: str) -> None:
    design = observability_design(load(name))
    ns = f"mlstack/{name}/hosts"
    alarms = {a.construct_id: a for a in design.alarms}
    idle = alarms["AcceleratorsIdle"]
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in idle.metrics] == [
        ("util", ns, "nvidia_smi_utilization_gpu", (), "Average", 300)
    ]
    assert (idle.threshold, idle.comparison, idle.evaluation_periods, idle.treat_missing_data) == (
        10,
        "LessThanThreshold",
        12,
        "notBreaching",
    )
    xid = alarms["GpuErrors"]
    assert [(m.namespace, m.name, m.statistic) for _, m in xid.metrics] == [(ns, "GpuXidErrors", "Sum")]
    assert (xid.threshold, xid.comparison) == (0, "GreaterThanThreshold")
    efa = alarms["EfaErrors"]
    assert [m.name for _, m in efa.metrics] == ["efa_rx_dropped", "efa_rdma_read_wr_err", "efa_rdma_write_wr_err"]
    assert efa.expression == "FILL(e0, 0) + FILL(e1, 0) + FILL(e2, 0)"
    names = {m.name for w in design.widgets for m in w.metrics}
    assert {"nvidia_smi_memory_used", "nvidia_smi_temperature_gpu", "nvidia_smi_power_draw", "efa_rx_bytes"} <= names
    assert not any("no agent" in line for line in design.omitted)


# ------------------------------------------------------------------------------------------ the templates


def _resources(session: Session, name: str) -> dict[str, Any]:
    resources: dict[str, Any] = session.blueprints[name].templates["TrainingClusterStack"]["Resources"]
    return resources


def _one(resources: dict[str, Any], kind: str, prefix: str = "") -> tuple[str, dict[str, Any]]:
    found = [(k, r) for k, r in resources.items() if r["Type"] == kind and k.startswith(prefix)]
    assert len(found) == 1, (kind, prefix, [k for k, _ in found])
    return found[0]


def _statements(resources: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    return [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == sid
    ]


@pytest.mark.parametrize("name", HOSTS)
def test_roles_may_publish_only_to_the_hosts_namespace_and_the_kernel_log(session: Session, name: str) -> None:
    resources = _resources(session, name)
    [metrics] = _statements(resources, "HostAgentMetrics")
    assert metrics == {
        "Sid": "HostAgentMetrics",
        "Action": "cloudwatch:PutMetricData",
        "Effect": "Allow",
        "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": f"mlstack/{name}/hosts"}},
    }
    [kernel] = _statements(resources, "HostAgentKernelLog")
    assert kernel["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    assert json.dumps(kernel["Resource"]).endswith(f':log-group:/mlstack/{name}/host-kernel:log-stream:*"]]}}')


@pytest.mark.parametrize("name", HOSTS)
def test_kernel_log_group_is_encrypted_and_its_filter_counts_xid_lines(session: Session, name: str) -> None:
    resources = _resources(session, name)
    lid, group = _one(resources, "AWS::Logs::LogGroup", "ObservabilityHostKernelLog")
    assert group["Properties"]["LogGroupName"] == f"/mlstack/{name}/host-kernel"
    assert "KmsKeyId" in group["Properties"] and group["Properties"]["RetentionInDays"] > 0
    assert group["DeletionPolicy"] == "RetainExceptOnCreate"
    _, flt = _one(resources, "AWS::Logs::MetricFilter", "ObservabilityGpuXidFilter")
    assert flt["Properties"]["FilterPattern"] == '"NVRM: Xid"'
    assert flt["Properties"]["LogGroupName"] == {"Ref": lid}
    assert flt["Properties"]["MetricTransformations"] == [
        {"MetricName": "GpuXidErrors", "MetricNamespace": f"mlstack/{name}/hosts", "MetricValue": "1", "Unit": "Count"}
    ]
    # The nodes' agents need the group from their first boot.
    kind = "AWS::Batch::ComputeEnvironment" if name.startswith("batch") else "AWS::SageMaker::Cluster"
    _, consumer = _one(resources, kind)
    assert lid in consumer["DependsOn"]


@pytest.mark.parametrize("name", HOSTS)
def test_alarm_metrics_in_the_template_name_the_hosts_namespace_without_dimensions(session: Session, name: str) -> None:
    resources = _resources(session, name)
    _, idle = _one(resources, "AWS::CloudWatch::Alarm", "ObservabilityAcceleratorsIdle")
    [stat] = [m["MetricStat"] for m in idle["Properties"]["Metrics"]]
    assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"], stat["Stat"], stat["Period"]) == (
        f"mlstack/{name}/hosts",
        "nvidia_smi_utilization_gpu",
        "Average",
        300,
    )
    assert "Dimensions" not in stat["Metric"]
    _, efa = _one(resources, "AWS::CloudWatch::Alarm", "ObservabilityEfaErrors")
    stats = [m["MetricStat"]["Metric"] for m in efa["Properties"]["Metrics"] if "MetricStat" in m]
    assert {(m["Namespace"], m["MetricName"]) for m in stats} == {
        (f"mlstack/{name}/hosts", c) for c in ("efa_rx_dropped", "efa_rdma_read_wr_err", "efa_rdma_write_wr_err")
    }


def _agent_part(session: Session) -> str:
    _, template = _one(_resources(session, "batch-training"), "AWS::EC2::LaunchTemplate")
    pieces = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "TOKEN" for p in pieces)
    [part] = [p for p in text.split("--==MLSTACK-BATCH==") if "amazon-cloudwatch-agent" in p]
    return part.split("\n\n", 1)[1]


def test_batch_user_data_writes_the_config_and_runs_the_installer(session: Session, tmp_path: Path) -> None:
    part = _agent_part(session)
    config = re.search(r"<<'MLSTACK_AGENT_CONFIG'\n(.*?)\nMLSTACK_AGENT_CONFIG\n", part, re.S)
    assert config is not None
    loaded = load("batch-training")
    assert loaded.training is not None
    assert json.loads(config.group(1)) == agent_config(loaded, loaded.training)
    assert 'set -- "/etc/mlstack/cloudwatch-agent.json"' in part
    assert HOST_AGENT_SCRIPT.read_text(encoding="utf-8") in part
    script = tmp_path / "part.sh"
    script.write_text(part, encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_slurm_on_create_runs_the_installer_without_failing_the_node() -> None:
    text = (ROOT / "runtime" / "hyperpod_slurm" / "on_create.sh").read_text(encoding="utf-8")
    assert 'bash "$HERE/install_cloudwatch_agent.sh" "$HERE/cloudwatch_agent.json" ||' in text
    subprocess.run(["bash", "-n", str(ROOT / "runtime" / "hyperpod_slurm" / "on_create.sh")], check=True)


# ------------------------------------------------------------------------------------------ the installer


_TOOLS = ("bash", "mktemp", "rm", "mkdir", "cat", "dirname", "env")


def _host(tmp_path: Path, *, gpu: bool, deb: bool, efa_devices: int) -> tuple[Path, dict[str, str], Path]:
    """A fake root, a PATH of stand-ins (each records its arguments in calls.log) and the EFA sysfs folder."""
    root, bin_dir, sysfs = tmp_path / "root", tmp_path / "bin", tmp_path / "infiniband"
    for d in (root, bin_dir, sysfs):
        d.mkdir()
    for i in range(efa_devices):
        (sysfs / f"rdmap{i}s0").mkdir()
    for tool in _TOOLS:
        real = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(real.stdout.strip())
    (bin_dir / "python3").symlink_to(sys.executable)
    log = tmp_path / "calls.log"
    stubs = ["curl", "systemctl", "rpm", "uname"] + (["dpkg"] if deb else []) + (["nvidia-smi"] if gpu else [])
    for stub in stubs:
        out = "echo x86_64" if stub == "uname" else ""
        (bin_dir / stub).write_text(f'#!/bin/bash\necho "{stub} $*" >>{log}\n{out}\n')
        (bin_dir / stub).chmod(0o755)
    ctl = root / "opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
    ctl.parent.mkdir(parents=True)
    ctl.write_text(f'#!/bin/bash\necho "ctl $*" >>{log}\n')
    ctl.chmod(0o755)
    env = {"PATH": str(bin_dir), "MLSTACK_ROOT": str(root), "MLSTACK_EFA_SYSFS": str(sysfs), "HOME": str(tmp_path)}
    return root, env, log


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = load("hyperpod-slurm-training")
    assert config.training is not None
    source = tmp_path / "cloudwatch_agent.json"
    source.write_text(json.dumps(agent_config(config, config.training)))
    result = subprocess.run(
        ["bash", str(HOST_AGENT_SCRIPT), str(source)], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result


def test_installer_on_ubuntu_installs_the_regional_deb_and_starts_the_agent(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=2)
    _run(tmp_path, env)
    calls = log.read_text().splitlines()
    base = "https://amazoncloudwatch-agent-us-east-1.s3.us-east-1.amazonaws.com"
    assert any(
        c.startswith("curl ") and c.endswith(f"{base}/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb") for c in calls
    )
    assert any(c.startswith("dpkg -i -E ") for c in calls) and not any(c.startswith("rpm ") for c in calls)
    assert "systemctl enable --now mlstack-kernel-log.service" in calls
    written = root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json"
    assert f"ctl -a fetch-config -m ec2 -s -c file:{written}" in calls
    assert "efa" in json.loads(written.read_text())["metrics"]["metrics_collected"]
    unit = (root / "etc/systemd/system/mlstack-kernel-log.service").read_text()
    assert "ExecStart=/usr/bin/journalctl --dmesg --boot --follow --no-tail" in unit
    assert "--cursor-file=/var/lib/mlstack/kernel-log.cursor" in unit
    assert "StandardOutput=append:/var/log/mlstack/kernel.log" in unit


def test_installer_on_amazon_linux_uses_the_rpm_and_drops_efa_without_devices(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=False, efa_devices=0)
    _run(tmp_path, env)
    calls = log.read_text().splitlines()
    assert any(c.endswith("/amazon_linux/amd64/latest/amazon-cloudwatch-agent.rpm") for c in calls)
    assert any(c.startswith("rpm -U ") for c in calls)
    written = json.loads((root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json").read_text())
    assert sorted(written["metrics"]["metrics_collected"]) == ["nvidia_gpu"]


def test_installer_leaves_a_host_without_gpus_alone(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=False, deb=True, efa_devices=0)
    result = _run(tmp_path, env)
    assert "no nvidia-smi" in result.stdout
    assert not log.exists()
    assert not (root / "etc").exists()
