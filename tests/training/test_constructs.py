"""Unit tests of the training and storage constructs, on one small module-scoped App (no EKS cluster: the
session synth of the shipped blueprints covers the cluster and node groups)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match, Template

from mlstack.catalog import get_instance
from mlstack.constructs.storage.fsx_lustre import DataRepository, FsxLustre
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.node_group import Capacity, node_labels, node_taints, node_user_data
from mlstack.k8s.kube import ami_type
from tests.synth import TEST_CONTEXT


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    app = cdk.App(context=TEST_CONTEXT)
    stack = cdk.Stack(app, "Unit", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        availability_zones=["us-east-1a"],
        subnet_configuration=[ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
        nat_gateways=0,
    )
    subnet = vpc.isolated_subnets[0]
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    with_pg = EfaNetworking(stack, "Efa", vpc=vpc, subnet=subnet)
    without_pg = EfaNetworking(stack, "EfaReserved", vpc=vpc, subnet=subnet, placement_group=False)
    repo = DataRepository(s3_path="s3://my-data/datasets/", file_system_path="/data")
    fsx = FsxLustre(
        stack,
        "Fsx",
        vpc=vpc,
        subnet=subnet,
        key=key,
        clients=with_pg,
        storage_capacity_gib=2400,
        per_unit_storage_throughput=500,
        data_repository=repo,
        removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
    )
    scratch = FsxLustre(
        stack,
        "Scratch",
        vpc=vpc,
        subnet=subnet,
        key=key,
        clients=without_pg,
        deployment_type="SCRATCH_2",
        per_unit_storage_throughput=None,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    return {
        "template": Template.from_stack(stack),
        "stack": stack,
        "efa": with_pg,
        "efa_reserved": without_pg,
        "fsx": fsx,
        "scratch": scratch,
        "key": key,
    }


def _logical_id(stack: cdk.Stack, construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.get_logical_id(element)


def test_efa_group_self_references_all_traffic_both_ways(built: dict[str, Any]) -> None:
    template: Template = built["template"]
    sg = _logical_id(built["stack"], built["efa"].security_group)
    ref = {"Fn::GetAtt": [sg, "GroupId"]}
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"GroupId": ref, "SourceSecurityGroupId": ref, "IpProtocol": "-1"}
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress", {"GroupId": ref, "DestinationSecurityGroupId": ref, "IpProtocol": "-1"}
    )
    # No allow-all egress to the internet on the EFA group.
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {"GroupDescription": Match.string_like_regexp("EFA peers"), "SecurityGroupEgress": Match.absent()},
    )


def test_placement_group_only_without_a_reservation(built: dict[str, Any]) -> None:
    template: Template = built["template"]
    template.resource_count_is("AWS::EC2::PlacementGroup", 1)
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})
    assert built["efa"].placement_group is not None
    assert built["efa_reserved"].placement_group is None


def test_efa_networking_exposes_connections_and_one_subnet(built: dict[str, Any]) -> None:
    efa: EfaNetworking = built["efa"]
    assert isinstance(efa.connections, ec2.Connections)
    assert efa.subnet.availability_zone == "us-east-1a"


@pytest.mark.parametrize(
    ("instance_type", "count"), [("p5.48xlarge", 32), ("p4d.24xlarge", 4), ("trn1.32xlarge", 8), ("g6e.12xlarge", 1)]
)
def test_network_interfaces_follow_the_catalog_layout(built: dict[str, Any], instance_type: str, count: int) -> None:
    efa: EfaNetworking = built["efa"]
    nics = efa.network_interfaces(instance_type, extra_security_group_ids=["sg-cluster"])
    assert len(nics) == count
    assert (nics[0].network_card_index, nics[0].device_index, nics[0].interface_type) == (0, 0, "efa")
    assert all(n.interface_type == "efa-only" and n.device_index == 1 for n in nics[1:])
    assert all(n.delete_on_termination and n.associate_public_ip_address is None for n in nics)
    assert all(n.groups is not None and "sg-cluster" in n.groups and len(n.groups) == 2 for n in nics)


def test_efa_on_every_card_and_p6_b300_card_zero(built: dict[str, Any]) -> None:
    efa: EfaNetworking = built["efa"]
    every = efa.network_interfaces("p5en.48xlarge", efa_on_every_card=True)
    assert {n.interface_type for n in every} == {"efa"}
    b300 = efa.network_interfaces("p6-b300.48xlarge")
    assert b300[0].interface_type == "interface" and sum(n.interface_type != "interface" for n in b300) == 16


def test_fsx_persistent_2_encrypted_retained_with_data_repository(built: dict[str, Any]) -> None:
    template: Template = built["template"]
    fsx_id = _logical_id(built["stack"], built["fsx"].file_system)
    resource = template.to_json()["Resources"][fsx_id]
    assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
    props = resource["Properties"]
    assert props["StorageCapacity"] == 2400 and props["FileSystemTypeVersion"] == "2.15"
    assert props["KmsKeyId"] == {"Fn::GetAtt": [_logical_id(built["stack"], built["key"]), "Arn"]}
    assert props["LustreConfiguration"] == {
        "AutomaticBackupRetentionDays": 0,
        "DataCompressionType": "LZ4",
        "DeploymentType": "PERSISTENT_2",
        "MetadataConfiguration": {"Mode": "AUTOMATIC"},
        "PerUnitStorageThroughput": 500,
    }
    template.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": {"Ref": fsx_id},
            "FileSystemPath": "/data",
            "DataRepositoryPath": "s3://my-data/datasets/",
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )


def test_scratch_fsx_has_no_persistent_settings(built: dict[str, Any]) -> None:
    template: Template = built["template"]
    scratch_id = _logical_id(built["stack"], built["scratch"].file_system)
    resource = template.to_json()["Resources"][scratch_id]
    assert resource["DeletionPolicy"] == "Delete"
    assert resource["Properties"]["LustreConfiguration"] == {
        "DataCompressionType": "LZ4",
        "DeploymentType": "SCRATCH_2",
    }


def test_fsx_security_group_admits_lustre_from_itself_and_clients(built: dict[str, Any]) -> None:
    template: Template = built["template"]
    stack = built["stack"]
    fsx_sg = {"Fn::GetAtt": [_logical_id(stack, built["fsx"].security_group), "GroupId"]}
    client_sg = {"Fn::GetAtt": [_logical_id(stack, built["efa"].security_group), "GroupId"]}
    for low, high in ((988, 988), (1018, 1023)):
        for source in (fsx_sg, client_sg):
            template.has_resource_properties(
                "AWS::EC2::SecurityGroupIngress",
                {"GroupId": fsx_sg, "SourceSecurityGroupId": source, "FromPort": low, "ToPort": high},
            )
        template.has_resource_properties(
            "AWS::EC2::SecurityGroupIngress",
            {"GroupId": client_sg, "SourceSecurityGroupId": fsx_sg, "FromPort": low, "ToPort": high},
        )


def test_fsx_kubernetes_manifests_bind_a_static_volume(built: dict[str, Any]) -> None:
    storage_class, volume, claim = built["fsx"].kubernetes_manifests(namespace="training")
    assert storage_class["provisioner"] == volume["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert volume["spec"]["capacity"] == {"storage": "2400Gi"}
    assert claim["metadata"] == {"name": "fsx", "namespace": "training"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert volume["spec"]["claimRef"] == {"namespace": "training", "name": "fsx"}


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [
        ("p5.48xlarge", "AL2023_x86_64_NVIDIA"),
        ("p6-b200.48xlarge", "AL2023_x86_64_NVIDIA"),
        ("g6e.12xlarge", "AL2023_x86_64_NVIDIA"),
        ("trn1.32xlarge", "AL2023_x86_64_NEURON"),
        ("trn2.48xlarge", "AL2023_x86_64_NEURON"),
        ("m7i.xlarge", "AL2023_x86_64_STANDARD"),
        ("c7g.16xlarge", "AL2023_ARM_64_STANDARD"),
    ],
)
def test_ami_type(instance_type: str, expected: str) -> None:
    assert ami_type(get_instance(instance_type)) == expected


def test_taints_and_labels_carry_instance_facts() -> None:
    p5 = get_instance("p5.48xlarge")
    assert {(t.key, t.value) for t in node_taints(p5, efa=True)} == {
        ("nvidia.com/gpu", "true"),
        ("vpc.amazonaws.com/efa", "true"),
    }
    labels = node_labels(name="p5", instance=p5, capacity=Capacity.capacity_block("cr-0123456789abcdef0"), efa=True)
    assert labels["mlstack.io/accelerator"] == "H100" and labels["mlstack.io/accelerator-count"] == "8"
    assert labels["mlstack.io/efa-interfaces"] == "32" and labels["mlstack.io/network-gbps"] == "3200"
    assert labels["mlstack.io/capacity"] == "capacity-block" and labels["mlstack.io/node-group"] == "p5"
    trn = get_instance("trn1.32xlarge")
    assert {t.key for t in node_taints(trn, efa=True)} == {"aws.amazon.com/neuron", "vpc.amazonaws.com/efa"}
    assert node_taints(get_instance("m7i.xlarge"), efa=False) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "capacity_block"}, "a reservation_id goes with capacity_reservation and capacity_block only"),
        ({"reservation_id": "cr-0123456789abcdef0"}, "a reservation_id goes with"),
        (
            {"kind": "spot", "placement_group_name": "pg"},
            "placement_group_name is for capacity_reservation only",
        ),
    ],
)
def test_capacity_rejects_inconsistent_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Capacity(**kwargs)


def test_local_nvme_user_data_is_a_nodeadm_mime_part() -> None:
    text = node_user_data(local_nvme=True)
    assert text is not None
    assert text.startswith("MIME-Version: 1.0\n")
    assert 'boundary="MLSTACK"' in text and text.rstrip().endswith("--MLSTACK--")
    assert "kind: NodeConfig" in text and "strategy: RAID0" in text


def test_fsx_security_group_and_its_own_rules_follow_the_file_system(built: dict[str, Any]) -> None:
    # A retained file system still uses its group: deleting the group would fail and leave DELETE_FAILED; and the
    # servers keep talking LNET to each other through the group's self-referencing rules.
    resources = built["template"].to_json()["Resources"]
    for name, policy in (("fsx", "RetainExceptOnCreate"), ("scratch", "Delete")):
        sg_id = _logical_id(built["stack"], built[name].security_group)
        sg_ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
        assert resources[sg_id].get("DeletionPolicy", "Delete") == policy
        own = [
            r
            for r in resources.values()
            if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
            and r["Properties"]["GroupId"] == sg_ref
            and sg_ref
            in (r["Properties"].get("SourceSecurityGroupId"), r["Properties"].get("DestinationSecurityGroupId"))
        ]
        assert len(own) == 4 and all(r.get("DeletionPolicy", "Delete") == policy for r in own)
        to_clients = [
            r
            for r in resources.values()
            if r["Type"].startswith("AWS::EC2::SecurityGroup")
            and r["Type"] != "AWS::EC2::SecurityGroup"
            and sg_ref
            in (r["Properties"].get("SourceSecurityGroupId"), r["Properties"].get("DestinationSecurityGroupId"))
            and r not in own
        ]
        assert to_clients and all("DeletionPolicy" not in r for r in to_clients)
