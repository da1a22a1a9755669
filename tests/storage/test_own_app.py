"""The storage README's own-app example (keyword props in a plain `cdk.Stack`, no blueprint), run as written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.own_app import resources, run_example


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example("storage", tmp_path_factory.mktemp("own-app"))


def test_example_loads_no_blueprint_schema(result: dict[str, Any]) -> None:
    assert result["schema_modules"] == []


def test_file_system_defaults_and_key(result: dict[str, Any]) -> None:
    template = result["template"]
    (key_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    (fs,) = resources(template, "AWS::FSx::FileSystem")
    assert fs["DeletionPolicy"] == "RetainExceptOnCreate" and fs["UpdateReplacePolicy"] == "Retain"
    props = fs["Properties"]
    assert props["StorageCapacity"] == 2400 and props["FileSystemTypeVersion"] == "2.15"
    assert props["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "DataCompressionType": "LZ4",
        "PerUnitStorageThroughput": 250,
        "MetadataConfiguration": {"Mode": "AUTOMATIC"},
        "AutomaticBackupRetentionDays": 0,
    }
    (association,) = resources(template, "AWS::FSx::DataRepositoryAssociation")
    assert association["Properties"]["DataRepositoryPath"] == "s3://team-datasets/train/"
    assert association["Properties"]["FileSystemPath"] == "/data"


def test_clients_get_the_lustre_ports(result: dict[str, Any]) -> None:
    template = result["template"]
    (nodes_id,) = [
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SecurityGroup" and k.startswith("Nodes")
    ]
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress")]
    from_nodes = sorted(
        (i["FromPort"], i["ToPort"])
        for i in ingress
        if i.get("SourceSecurityGroupId") == {"Fn::GetAtt": [nodes_id, "GroupId"]}
    )
    assert from_nodes == [(988, 988), (1018, 1023)]
