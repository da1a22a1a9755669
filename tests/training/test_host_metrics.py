"""Per-GPU and EFA metrics on the engines whose hosts are ours (batch, hyperpod-slurm): the CloudWatch agent's
configuration (checked against the agent's own JSON schema), the Xid filter on real kernel lines, the user data
and lifecycle wiring, the instance roles' exact statements, the endpoints, and the alarms on what the agent
publishes (the script that installs it: test_host_agent_installer.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import load
from mlstack.constructs.training.host_agent import user_data_installer
from mlstack.design.host_metrics import (
    EFA_COUNTERS,
    GPU_FIELDS,
    XID_HARDWARE,
    agent_config,
    xid_pattern,
)
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


def _fields(text: str) -> list[str]:
    """A space-delimited log event's fields as CloudWatch Logs splits them: on spaces, a "..." or [...] run is one
    field."""
    return re.findall(r'"[^"]*"|\[[^\]]*\]|\S+', text)


def _matches(pattern: str, event: str) -> bool:
    """CloudWatch Logs' space-delimited filter semantics for what `xid_pattern` uses (a test-only matcher: no
    library implements them): named fields, `name="value"` conditions joined by `||` on one field, a trailing
    `...` for any further fields."""
    assert pattern.startswith("[") and pattern.endswith("]")
    columns = [c.strip() for c in pattern[1:-1].split(", ")]
    fields = _fields(event)
    rest = columns[-1] == "..."
    if rest:
        columns = columns[:-1]
    if len(fields) < len(columns) or (not rest and len(fields) != len(columns)):
        return False
    for column, value in zip(columns, fields, strict=False):
        alternatives = [a.strip() for a in column.split("||")]
        if all("=" not in a for a in alternatives):
            continue  # a bare name: any value
        wanted = {a.split("=", 1)[1].strip().strip('"') for a in alternatives}
        if value.strip('"') not in wanted:
            return False
    return True


# Kernel lines as `journalctl --dmesg --output=short-iso` writes them (message text: NVIDIA, "XID Errors").
_XID_LINE = "2026-12-01T22:00:00+0000 ip-10-0-1-2 kernel: NVRM: Xid (PCI:0000:53:00): {code}, pid={pid}, {text}"


@pytest.mark.parametrize(
    ("code", "text", "counted"),
    [
        (79, "GPU has fallen off the bus.", True),
        (
            48,
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0",
            True,
        ),
        (94, "Contained: SM (0x1). RST: No, D-RST: No", True),
        (95, "Uncontained: FBHUB. RST: Yes, D-RST: No", True),
        (63, "Row Remapper: New row marked for remapping, reset gpu to activate.", True),
        (74, "NVLink: fatal error detected on link 3", True),
        (119, "Timeout after 6s of waiting for RPC response from GPU0 GSP!", True),
        (13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address", False),
        (31, "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_00000000.", False),
        (43, "Ch 00000008", False),
        (45, "Ch 00000010", False),
    ],
)
def test_xid_filter_counts_hardware_xids_and_not_application_ones(code: int, text: str, counted: bool) -> None:
    assert _matches(xid_pattern(), _XID_LINE.format(code=code, pid=4242, text=text)) is counted
    assert (code in XID_HARDWARE) is counted


def test_xid_filter_ignores_other_kernel_lines() -> None:
    pattern = xid_pattern()
    for line in (
        "2026-12-01T22:00:00+0000 ip-10-0-1-2 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20",
        "2026-12-01T22:00:00+0000 ip-10-0-1-2 kernel: EXT4-fs (nvme0n1p1): 79, mounted filesystem",
        "2026-12-01T22:00:00+0000 ip-10-0-1-2 kernel: NVRM: Xid (PCI:0000:53:00): 790, pid=1, unknown",
    ):
        assert not _matches(pattern, line), line
    # Older drivers print the bus id without "PCI:": still one field.
    assert _matches(pattern, "2026-12-01T22:00:00+0000 h kernel: NVRM: Xid (0000:53:00): 79, GPU has fallen off")
    assert len(pattern) <= 1024  # PutMetricFilter's filterPattern limit


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
    assert flt["Properties"]["FilterPattern"] == (
        '[time, host, kernel="kernel:", nvrm="NVRM:", xid="Xid", pci, code="48," || code="63," || code="64," || '
        'code="74," || code="79," || code="92," || code="94," || code="95," || code="119," || code="120,", ...]'
    )
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
    assert user_data_installer() in part
    script = tmp_path / "part.sh"
    script.write_text(part, encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_batch_user_data_leaves_room_under_the_ec2_limit(session: Session) -> None:
    """EC2 takes 16 KB of user data before base64 (EC2 User Guide, "Run commands when you launch an EC2 instance
    with user data input"), and AWS Batch adds a MIME part of its own (its ECS settings) to the launch template's."""
    _, template = _one(_resources(session, "batch-training"), "AWS::EC2::LaunchTemplate")
    pieces = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    size = sum(len(p) if isinstance(p, str) else 128 for p in pieces)  # a token: the FSx DNS or mount name
    assert size <= 15 * 1024, size


def test_slurm_on_create_runs_the_installer_without_failing_the_node() -> None:
    text = (ROOT / "runtime" / "hyperpod_slurm" / "on_create.sh").read_text(encoding="utf-8")
    assert 'bash "$HERE/install_cloudwatch_agent.sh" "$HERE/cloudwatch_agent.json" ||' in text
    subprocess.run(["bash", "-n", str(ROOT / "runtime" / "hyperpod_slurm" / "on_create.sh")], check=True)


@pytest.mark.parametrize("name", HOSTS)
def test_hosts_reach_cloudwatch_metrics_and_logs_through_interface_endpoints(session: Session, name: str) -> None:
    services = json.dumps(
        [
            r["Properties"]["ServiceName"]
            for r in session.blueprints[name].templates["NetworkStack"]["Resources"].values()
            if r["Type"] == "AWS::EC2::VPCEndpoint"
        ]
    )
    assert ".monitoring" in services and ".logs" in services


def test_batch_compute_environment_waits_for_the_instance_roles_policy(session: Session) -> None:
    """The agent's grants are in the instance role's default policy: an instance that boots before it exists (min
    vCPUs above 0) has no PutMetricData until the agent's retries reach it."""
    resources = _resources(session, "batch-training")
    policy, _ = _one(resources, "AWS::IAM::Policy", "BatchInstanceRoleDefaultPolicy")
    _, compute = _one(resources, "AWS::Batch::ComputeEnvironment")
    assert policy in compute["DependsOn"]
