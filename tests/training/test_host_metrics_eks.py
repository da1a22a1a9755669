"""Per-GPU metrics on the Kubernetes engines: the nvidia-smi CloudWatch agent in the user data of the EKS managed
GPU node groups and of the Karpenter EC2NodeClass, HyperPod-EKS's on_create, the node roles' exact statements, and
the alarms on what the agent publishes (Neuron groups keep the Neuron monitor and get no agent)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import load
from mlstack.constructs.training.host_agent import user_data_installer
from mlstack.design.host_metrics import agent_config, has_host_agent
from mlstack.design.observability import observability_design
from tests.synth import ROOT, Session

KUBERNETES_GPU = ("eks-gpu-training", "eks-karpenter-training", "hyperpod-eks-training")
STACK = "TrainingClusterStack"


def _resources(session: Session, name: str) -> dict[str, Any]:
    resources: dict[str, Any] = session.blueprints[name].templates[STACK]["Resources"]
    return resources


def _statements_of_role(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def _expected_statements(name: str) -> list[dict[str, Any]]:
    group = f"/mlstack/{name}/host-kernel"
    return [
        {
            "Sid": "HostAgentMetrics",
            "Action": "cloudwatch:PutMetricData",
            "Effect": "Allow",
            "Resource": "*",
            "Condition": {"StringEquals": {"cloudwatch:namespace": f"mlstack/{name}/hosts"}},
        },
        {
            "Sid": "HostAgentKernelLog",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":logs:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        f":log-group:{group}:log-stream:*",
                    ],
                ]
            },
        },
    ]


def _shell_part(mime: str) -> str:
    """The agent's text/x-shellscript part of a MIME document (boundary MLSTACK)."""
    assert mime.startswith("MIME-Version: 1.0\n") and 'boundary="MLSTACK"' in mime
    assert mime.rstrip().endswith("--MLSTACK--")
    parts = [p for p in mime.split("--MLSTACK") if "text/x-shellscript" in p]
    assert len(parts) == 1
    return parts[0].split("\n\n", 1)[1]


def _check_part(part: str, name: str, tmp_path: Path) -> None:
    config = re.search(r"<<'MLSTACK_AGENT_CONFIG'\n(.*?)\nMLSTACK_AGENT_CONFIG\n", part, re.S)
    assert config is not None
    loaded = load(name)
    assert loaded.training is not None
    assert json.loads(config.group(1)) == agent_config(loaded, loaded.training)
    installer = re.search(r"<<'MLSTACK_AGENT_INSTALLER'\n(.*?\n)MLSTACK_AGENT_INSTALLER\n", part, re.S)
    assert installer is not None and installer.group(1) == user_data_installer()
    # A transient unit after the NVIDIA driver's (nvidia-kmod-load.service is not ordered before cloud-init's user
    # data on AL2023), waiting for the GPUs, off kubelet's start path.
    assert part.rstrip("\n").endswith(
        "systemd-run --no-block --unit=mlstack-host-agent --property=After=nvidia-kmod-load.service /bin/bash -c "
        "'for _ in $(seq 60); do nvidia-smi -L >/dev/null 2>&1 && break; sleep 5; done; "
        "bash /etc/mlstack/install_cloudwatch_agent.sh /etc/mlstack/cloudwatch_agent.json || "
        'echo "[mlstack] CloudWatch agent not started: no GPU metrics from this node"\''
    )
    script = tmp_path / "part.sh"
    script.write_text(part, encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True)


# ------------------------------------------------------------------------------------------ design


def test_every_kubernetes_gpu_blueprint_runs_the_agent_without_efa_and_neuron_does_not() -> None:
    for name in KUBERNETES_GPU:
        config = load(name)
        assert config.training is not None and has_host_agent(config.training)
        rendered = agent_config(config, config.training)
        # EFA counters stay with Container Insights (node_efa_*): not published twice.
        assert sorted(rendered["metrics"]["metrics_collected"]) == ["nvidia_gpu"]  # type: ignore[index]
    trn = load("eks-trn1-training")
    assert trn.training is not None and not has_host_agent(trn.training)
    assert observability_design(trn).host_agent is None


@pytest.mark.parametrize("name", KUBERNETES_GPU)
def test_kubernetes_alarms_read_the_agents_series_and_keep_container_insights(name: str) -> None:
    design = observability_design(load(name))
    ns = f"mlstack/{name}/hosts"
    alarms = {a.construct_id: a for a in design.alarms}
    idle = alarms["AcceleratorsIdle"]
    assert [(i, m.namespace, m.name, m.dimensions, m.statistic, m.period_s) for i, m in idle.metrics] == [
        ("util", ns, "nvidia_smi_utilization_gpu", (), "Average", 300)
    ]
    assert idle.expression is None and idle.threshold == 10 and idle.evaluation_periods == 12
    xid = alarms["GpuErrors"]
    assert [(m.namespace, m.name, m.dimensions, m.statistic) for _, m in xid.metrics] == [
        (ns, "GpuXidErrors", (), "Sum")
    ]
    # Container Insights' node and EFA alarms stay (EFA from the add-on: ClusterName dimension).
    cluster = (("ClusterName", f"{name}-cluster"),)
    assert [(m.namespace, m.name, m.dimensions) for _, m in alarms["NodesFailed"].metrics] == [
        ("ContainerInsights", "cluster_failed_node_count", cluster)
    ]
    if "EfaErrors" in alarms:
        assert [(m.namespace, m.name) for _, m in alarms["EfaErrors"].metrics] == [
            ("ContainerInsights", "node_efa_rx_dropped")
        ]
    widgets = {w.title for w in design.widgets}
    assert {"GPUs held by pods", "GPU utilisation, % (every GPU of the cluster)", "GPU Xid errors (kernel log)"} <= (
        widgets
    )
    assert not any("GPU utilisation, memory, power" in line for line in design.omitted)


# ------------------------------------------------------------------------------------------ templates


def test_gpu_node_group_user_data_installs_the_agent(session: Session, tmp_path: Path) -> None:
    resources = _resources(session, "eks-gpu-training")
    templates = [(k, r) for k, r in resources.items() if r["Type"] == "AWS::EC2::LaunchTemplate" and "Nodes" in k]
    assert templates
    for _, template in templates:
        mime = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
        assert isinstance(mime, str)
        _check_part(_shell_part(mime), "eks-gpu-training", tmp_path)
        # The p5's NVMe NodeConfig part stays beside it.
        assert "Content-Type: application/node.eks.aws" in mime and "strategy: RAID0" in mime


def test_neuron_node_group_user_data_is_unchanged(session: Session) -> None:
    resources = _resources(session, "eks-trn1-training")
    for lid, r in resources.items():
        if r["Type"] == "AWS::EC2::LaunchTemplate" and "Nodes" in lid:
            assert "install_cloudwatch_agent" not in json.dumps(r["Properties"])
    assert not any(r["Type"] == "AWS::Logs::MetricFilter" and "Xid" in k for k, r in resources.items())


def test_gpu_node_role_has_exactly_the_agents_statements(session: Session) -> None:
    name = "eks-gpu-training"
    resources = _resources(session, name)
    nodegroups = [r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    gpu = [ng for ng in nodegroups if ng["Properties"]["Labels"].get("mlstack.io/accelerator-kind") == "gpu"]
    assert gpu and len(gpu) < len(nodegroups)
    kernel_log = next(k for k in resources if k.startswith("ObservabilityHostKernelLog"))
    for ng in nodegroups:
        role = ng["Properties"]["NodeRole"]["Fn::GetAtt"][0]
        if ng in gpu:
            assert _statements_of_role(resources, role) == _expected_statements(name)
            # The group exists before a node boots (the agent may not create it).
            assert kernel_log in ng["DependsOn"]
        else:  # the system nodes: no GPU, no agent
            assert _statements_of_role(resources, role) == []


def test_karpenter_node_class_user_data_installs_the_agent(session: Session, tmp_path: Path) -> None:
    name = "eks-karpenter-training"
    resources = _resources(session, name)
    kernel_log = next(k for k in resources if k.startswith("ObservabilityHostKernelLog"))
    found = 0
    for lid, r in resources.items():
        if r["Type"] != "Custom::AWSCDK-EKS-KubernetesResource" or "EC2NodeClass" not in json.dumps(r["Properties"]):
            continue
        manifest = r["Properties"]["Manifest"]
        text = (
            manifest if isinstance(manifest, str) else "".join(p for p in manifest["Fn::Join"][1] if isinstance(p, str))
        )
        start = text.index('"userData":"') + len('"userData":"')
        end = text.index('"', start)
        while text[end - 1] == "\\":
            end = text.index('"', end + 1)
        mime = json.loads(f'"{text[start:end]}"')
        _check_part(_shell_part(mime), name, tmp_path)
        assert kernel_log in r["DependsOn"], lid
        found += 1
    assert found
    role = next(k for k in resources if k.startswith("KarpenterNodeRole") and resources[k]["Type"] == "AWS::IAM::Role")
    assert _statements_of_role(resources, role) == _expected_statements(name)


def test_hyperpod_eks_uploads_the_agent_and_grants_the_execution_role(session: Session) -> None:
    name = "hyperpod-eks-training"
    resources = _resources(session, name)
    statements = [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid", "").startswith("HostAgent")
    ]
    assert statements == _expected_statements(name)
    [upload] = [r for r in resources.values() if r["Type"] == "Custom::CDKBucketDeployment"]
    assert len(upload["Properties"]["SourceObjectKeys"]) >= 3  # scripts + the installer + its configuration
    kernel_log = next(k for k in resources if k.startswith("ObservabilityHostKernelLog"))
    [cluster] = [r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster"]
    assert kernel_log in cluster["DependsOn"]


# ------------------------------------------------------------------------------------------ on_create


def test_hyperpod_eks_on_create_runs_the_installer_and_survives_its_failure(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    text = (ROOT / "runtime" / "hyperpod_eks" / "on_create.sh").read_text(encoding="utf-8")
    (scripts / "on_create.sh").write_text(text, encoding="utf-8")
    (scripts / "cloudwatch_agent.json").write_text("{}", encoding="utf-8")
    calls = tmp_path / "calls.log"
    # A stand-in installer that records its arguments and fails: the node must still come up.
    (scripts / "install_cloudwatch_agent.sh").write_text(f'echo "$@" >{calls}\nexit 3\n', encoding="utf-8")
    containerd = tmp_path / "containerd.toml"
    containerd.write_text("version = 2\n[plugins]\n", encoding="utf-8")
    log = tmp_path / "provisioning.log"
    env = {
        **os.environ,
        "HYPERPOD_LOG_FILE": str(log),
        "HYPERPOD_DATA_DISK": str(tmp_path / "not-mounted"),
        "HYPERPOD_CONTAINERD_CONFIG": str(containerd),
        "HYPERPOD_MOUNT_TRIES": "1",
    }
    subprocess.run(["bash", str(scripts / "on_create.sh")], env=env, check=True, capture_output=True, timeout=60)
    assert calls.read_text().split() == [str(scripts / "cloudwatch_agent.json")]
    assert "CloudWatch agent not started" in log.read_text()
    assert "[stop] on_create.sh" in log.read_text()


@pytest.mark.parametrize("name", KUBERNETES_GPU)
def test_access_models_the_agents_calls_from_the_gpu_nodes(session: Session, name: str) -> None:
    from mlstack.access import cli as access_cli
    from mlstack.access import evaluate

    report = evaluate(name, access_cli.stacks_of(session.blueprints[name]))
    stream = f"log-group:/mlstack/{name}/host-kernel:log-stream:"
    calls = [
        c
        for c in report.calls
        if (c.action == "cloudwatch:PutMetricData" and c.context.get("cloudwatch:namespace") == f"mlstack/{name}/hosts")
        or (c.action in ("logs:CreateLogStream", "logs:PutLogEvents") and stream in c.resource)
    ]
    kind = "hyperpod" if name.startswith("hyperpod") else "eks-node"
    assert {c.action for c in calls if c.kind == kind} == {
        "cloudwatch:PutMetricData",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    assert all(c.decision == "Allowed" for c in calls), [(c.key(), c.decision) for c in calls]


def test_node_user_data_stays_under_ec2s_limit(session: Session) -> None:
    # EC2 takes at most 16 KB of user data before base64 (EC2 User Guide, "Run commands when you launch an EC2
    # instance with user data input"); EKS and Karpenter add their own NodeConfig part (2-3 KB) to ours.
    for name in ("eks-gpu-training", "eks-karpenter-training"):
        text = json.dumps(_resources(session, name))
        assert "install_cloudwatch_agent" in text
    for r in _resources(session, "eks-gpu-training").values():
        if r["Type"] == "AWS::EC2::LaunchTemplate" and "UserData" in r["Properties"]["LaunchTemplateData"]:
            assert len(r["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"].encode()) < 12 * 1024
