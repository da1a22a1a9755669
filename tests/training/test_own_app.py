"""The training README's "use it from your own CDK app" example: keyword props only, a plain `cdk.Stack`, no
blueprint. The test runs the README's code block as written, in a fresh interpreter (so it also shows the
constructs do not load the blueprint schema), and asserts the template it synthesizes; then the factory's
bad inputs."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms

from mlstack.catalog import efa_layout
from mlstack.constructs.training.cluster import TrainingCluster
from tests.own_app import CONSTRUCTS, resources, run_example


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example("training", tmp_path_factory.mktemp("own-app"))


def _one(template: dict[str, Any], type_: str) -> dict[str, Any]:
    found = resources(template, type_)
    assert len(found) == 1, f"{len(found)} {type_}"
    return found[0]


def test_constructs_never_load_the_blueprint_schema(result: dict[str, Any]) -> None:
    assert result["schema_modules"] == []


def test_launch_template_carries_every_efa_of_the_catalog_layout(result: dict[str, Any]) -> None:
    data = _one(result["template"], "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    layout = efa_layout("p5.48xlarge")
    interfaces = data["NetworkInterfaces"]
    assert len(interfaces) == len(layout) == 32
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [
        (n.network_card_index, n.device_index, n.interface_type) for n in layout
    ]
    assert all(i["DeleteOnTermination"] and len(i["Groups"]) == 2 for i in interfaces)
    assert "AssociatePublicIpAddress" not in json.dumps(interfaces)
    assert data["InstanceType"] == "p5.48xlarge"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert "Placement" not in data  # a Capacity Block fixes placement itself


def test_node_group_is_tainted_labelled_and_scaled_from_zero(result: dict[str, Any]) -> None:
    template = result["template"]
    groups = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Nodegroup"]
    (p5,) = [g for g in groups if g["Labels"]["mlstack.io/node-group"] == "p5"]
    assert p5["ScalingConfig"] == {"DesiredSize": 0, "MinSize": 0, "MaxSize": 4}
    assert sorted((t["Key"], t["Effect"]) for t in p5["Taints"]) == [
        ("nvidia.com/gpu", "NO_SCHEDULE"),
        ("vpc.amazonaws.com/efa", "NO_SCHEDULE"),
    ]
    assert p5["CapacityType"] == "CAPACITY_BLOCK" and p5["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert p5["Labels"]["mlstack.io/efa-interfaces"] == "32"
    assert len(p5["Subnets"]) == 1


def test_cluster_follows_the_group_added_later(result: dict[str, Any]) -> None:
    # The device plugins and the node monitoring agent's tolerations come from the groups added through
    # add_accelerated_node_group, after the cluster was built.
    template = result["template"]
    charts = {
        r["Properties"]["Release"]: r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }
    assert {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"} <= set(charts)
    assert not any("neuron" in release for release in charts)
    efa_values = json.loads(charts["aws-efa-k8s-device-plugin"]["Values"])
    assert efa_values["supportedInstanceLabels"]["values"] == ["p5.48xlarge"]
    (monitoring,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "eks-node-monitoring-agent"
    ]
    dcgm = json.loads(monitoring["ConfigurationValues"])["dcgmAgent"]["tolerations"]
    assert [t["key"] for t in dcgm] == ["nvidia.com/gpu", "vpc.amazonaws.com/efa"]


def test_project_key_allows_ebs_through_ec2(result: dict[str, Any]) -> None:
    key = _one(result["template"], "AWS::KMS::Key")
    sids = [s.get("Sid") for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert "AllowEbsThroughEc2" in sids and "AllowEbsGrantsThroughEc2" in sids


LAYERS = ("training", "network", "storage", "security")


def test_no_construct_module_of_these_layers_imports_the_blueprint_schema() -> None:
    # The stacks map the blueprint to keyword props; a construct that read the schema could not be used without
    # a blueprint file. (The subprocess test above covers what the example imports; this covers every module.)
    root = CONSTRUCTS
    offenders = []
    for path in [root / "common.py", *(p for layer in LAYERS for p in (root / layer).rglob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [
                f"{path.name}: {n}" for n in names if n == "mlstack.config" or n.startswith("mlstack.config.")
            ]
    assert offenders == []


@pytest.fixture(scope="module")
def cluster() -> TrainingCluster:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    built = TrainingCluster(stack, "Cluster", vpc=vpc, subnets=vpc.private_subnets, key=key, cluster_name="c")
    built.add_accelerated_node_group("trn", instance_type="trn1.32xlarge", subnets=[vpc.private_subnets[0]])
    return built


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("trn", {"instance_type": "trn1.32xlarge"}, "node group 'trn' exists already"),
        ("system", {"instance_type": "m7i.xlarge"}, "'system' names the system node group"),
        ("two", {"instance_type": "p5.48xlarge", "two_subnets": True}, "an EFA group takes exactly one subnet, got 2"),
        ("cpu", {"instance_type": "m7i.xlarge", "efa": True}, "m7i.xlarge does not support EFA"),
        ("size", {"instance_type": "g6e.xlarge", "desired_size": 3}, "min_size <= desired_size <= max_size"),
    ],
)
def test_add_accelerated_node_group_rejects_bad_props(
    cluster: TrainingCluster, name: str, kwargs: dict[str, Any], message: str
) -> None:
    subnets = list(cluster.vpc.private_subnets)
    if not kwargs.pop("two_subnets", False):
        subnets = subnets[:1]
    with pytest.raises(ValueError, match=re.escape(message)):
        cluster.add_accelerated_node_group(name, subnets=subnets, **kwargs)


def test_a_neuron_group_gets_the_neuron_plugin_and_a_placement_group(cluster: TrainingCluster) -> None:
    assert sorted(cluster.charts) == ["aws-efa-k8s-device-plugin", "kubeflow-trainer", "neuron-helm-chart"]
    group = cluster.node_groups["trn"]
    assert group.efa is not None and group.efa.placement_group is not None
    assert cluster.efa_instance_types() == ["trn1.32xlarge"]
    assert cluster.taint_keys() == ["aws.amazon.com/neuron", "vpc.amazonaws.com/efa"]
