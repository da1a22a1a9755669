"""TrainingClusterStack variants that no shipped blueprint covers, from one synth of a test blueprint file.

The blueprint has Graviton system nodes, two EFA groups (on-demand and a Capacity Block), an ODCR group, a CPU group
without EFA, a model that does not fit and a job on the second EFA group. Checked: launch templates and node groups
per capacity kind, FSx reachable from every node group, the model-fit warning at synth, and the same gates as
shipped blueprints.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from cfnlint.api import ManualArgs, lint

from mlstack.stacks.training import TrainingClusterStack
from mlstack.synth_all import SynthesizedBlueprint
from tests.synth import ROOT, Session, synthesize

RESERVATION = "cr-0123456789abcdef0"
TARGET = {"CapacityReservationTarget": {"CapacityReservationId": RESERVATION}}
BLUEPRINT: dict[str, Any] = {
    "description": "training stack variants not in the shipped blueprints",
    "env": {"region": "us-east-1"},
    "network": {"cidr": "10.9.0.0/16", "availability_zone_ids": ["use1-az4", "use1-az6"]},
    "training": {
        "system_node_group": {"instance_type": "c7g.xlarge"},
        "node_groups": [
            {"name": "a", "instance_type": "p5.48xlarge", "max_size": 1, "availability_zones": ["use1-az4"]},
            {
                "name": "b",
                "instance_type": "p5.48xlarge",
                "max_size": 1,
                "availability_zones": ["use1-az4"],
                "capacity": {"type": "capacity_block", "reservation_id": RESERVATION},
            },
            {
                "name": "odcr",
                "instance_type": "p4d.24xlarge",
                "max_size": 1,
                "availability_zones": ["use1-az4"],
                "capacity": {"type": "capacity_reservation", "reservation_id": RESERVATION},
            },
            {"name": "cpu", "instance_type": "m7i.xlarge", "efa": False, "max_size": 1, "capacity": {"type": "spot"}},
        ],
        "fsx": {"storage_capacity_gib": 1200, "data_repository": {"bucket": "my-training-data", "prefix": "ds/"}},
        "model": {"params": 70e9, "zero_stage": 0},
        "job": {"node_group": "b", "nodes": 1},
        "max_nodes": 4,
    },
}


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Session, SynthesizedBlueprint]:
    root = tmp_path_factory.mktemp("variants")
    path = root / "variants.yaml"
    path.write_text(yaml.safe_dump(BLUEPRINT))
    session = synthesize(root / "out", [path])
    return session, session.blueprints["variants"]


@pytest.fixture(scope="module")
def stack(synth: tuple[Session, SynthesizedBlueprint]) -> TrainingClusterStack:
    built = synth[1].built
    assert built is not None  # an in-process synth keeps its constructs
    training = built.training
    assert isinstance(training, TrainingClusterStack)
    return training


@pytest.fixture(scope="module")
def template(synth: tuple[Session, SynthesizedBlueprint]) -> dict[str, Any]:
    return synth[1].templates["TrainingClusterStack"]


def _logical_id(stack: TrainingClusterStack, construct: Any) -> str:
    element = construct if hasattr(construct, "logical_id") else construct.node.default_child
    return str(stack.get_logical_id(element))


def _launch_template(stack: TrainingClusterStack, template: dict[str, Any], group: str) -> dict[str, Any]:
    data = template["Resources"][_logical_id(stack, stack.node_groups[group].launch_template)]
    return dict(data["Properties"]["LaunchTemplateData"])


def _nodegroup(stack: TrainingClusterStack, template: dict[str, Any], group: str) -> dict[str, Any]:
    return dict(template["Resources"][_logical_id(stack, stack.node_groups[group].nodegroup)]["Properties"])


def test_capacity_block_group_uses_the_block_market_and_no_placement_group(
    stack: TrainingClusterStack, template: dict[str, Any]
) -> None:
    data = _launch_template(stack, template, "b")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == TARGET
    assert "Placement" not in data and len(data["NetworkInterfaces"]) == 32
    props = _nodegroup(stack, template, "b")
    assert props["CapacityType"] == "CAPACITY_BLOCK" and "InstanceTypes" not in props
    assert props["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert stack.efa["b"].placement_group is None and stack.efa["a"].placement_group is not None
    placement_groups = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::PlacementGroup"]
    assert len(placement_groups) == 1  # group a only


def test_odcr_group_targets_the_reservation_on_demand(stack: TrainingClusterStack, template: dict[str, Any]) -> None:
    data = _launch_template(stack, template, "odcr")
    assert data["CapacityReservationSpecification"] == TARGET
    assert "InstanceMarketOptions" not in data and "Placement" not in data
    assert _nodegroup(stack, template, "odcr")["CapacityType"] == "ON_DEMAND"


def test_group_without_efa_has_only_the_cluster_security_group(
    stack: TrainingClusterStack, template: dict[str, Any]
) -> None:
    data = _launch_template(stack, template, "cpu")
    assert "NetworkInterfaces" not in data
    cluster = _logical_id(stack, stack.cluster.cluster)
    assert data["SecurityGroupIds"] == [{"Fn::GetAtt": [cluster, "ClusterSecurityGroupId"]}]
    assert data["MetadataOptions"]["HttpTokens"] == "required" and data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"]
    props = _nodegroup(stack, template, "cpu")
    assert props["CapacityType"] == "SPOT" and props["AmiType"] == "AL2023_x86_64_STANDARD"
    assert "Taints" not in props or props["Taints"] == []


def test_fsx_admits_lustre_from_every_node_group(stack: TrainingClusterStack, template: dict[str, Any]) -> None:
    # The job runs on group b and the CPU group has no EFA group: the file system must admit them all, not only
    # the first EFA group.
    assert stack.fsx is not None
    fsx_sg = {"Fn::GetAtt": [_logical_id(stack, stack.fsx.security_group), "GroupId"]}
    cluster_sg = {"Fn::GetAtt": [_logical_id(stack, stack.cluster.cluster), "ClusterSecurityGroupId"]}
    clients = [{"Fn::GetAtt": [_logical_id(stack, efa.security_group), "GroupId"]} for efa in stack.efa.values()]
    assert len(clients) == 3
    ingress = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    for source in [*clients, cluster_sg]:
        for low, high in ((988, 988), (1018, 1023)):
            rule = {"GroupId": fsx_sg, "SourceSecurityGroupId": source, "FromPort": low, "ToPort": high}
            assert any(rule.items() <= p.items() for p in ingress), (source, low)
            back = {"GroupId": source, "SourceSecurityGroupId": fsx_sg, "FromPort": low, "ToPort": high}
            assert any(back.items() <= p.items() for p in ingress), (source, low)


def test_a_model_that_does_not_fit_is_a_synth_warning(stack: TrainingClusterStack) -> None:
    warnings = [str(entry.data) for entry in stack.node.metadata if entry.type == "aws:cdk:warning"]
    fit = [w for w in warnings if "[ack: mlstack:model-fit]" in w]
    assert len(fit) == 3, warnings  # a, b (H100) and odcr (A100); the CPU group has no accelerator
    assert any("node group 'a': a 70B-parameter model (bf16, ZeRO stage 0)" in w for w in fit)
    assert any("more than the 68.0 GiB usable (85%) of the 80 GiB of a H100" in w for w in fit)


def test_variants_pass_the_gates(synth: tuple[Session, SynthesizedBlueprint]) -> None:
    session, bp = synth
    violations = [
        f"{report['pluginName']}: {violation['ruleName']}"
        for report in session.validation_report.get("pluginReports", [])
        for violation in report["violations"]
        if violation.get("severity") in ("error", "fatal") or report["pluginName"] != "AwsSolutions"
    ]
    # The model-fit warnings are reported with the construct annotations; nothing else may be.
    assert session.nag_failure is None
    assert violations == ["Construct Annotations: Annotation::mlstack:model-fit"] * 3
    ignores = list(yaml.safe_load((ROOT / ".cfnlintrc.yaml").read_text()).get("ignore_checks", []))
    for stack_id, body in bp.templates.items():
        matches = lint(json.dumps(body), config=ManualArgs(regions=["us-east-1"], ignore_checks=ignores))
        assert [f"{stack_id}: {m.rule.id} {m.message}" for m in matches] == []


def test_graviton_system_nodes_get_the_arm_ami(stack: TrainingClusterStack, template: dict[str, Any]) -> None:
    props = template["Resources"][_logical_id(stack, stack.cluster.system_nodes)]["Properties"]
    assert props["InstanceTypes"] == ["c7g.xlarge"] and props["AmiType"] == "AL2023_ARM_64_STANDARD"
