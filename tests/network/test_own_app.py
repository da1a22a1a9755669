"""The network README's own-app example (keyword props in a plain `cdk.Stack`, no blueprint), run as written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.own_app import resources, run_example


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_example("network", tmp_path_factory.mktemp("own-app"))


def test_example_loads_no_blueprint_schema(result: dict[str, Any]) -> None:
    assert result["schema_modules"] == []


def test_subnets_are_pinned_by_az_id_and_never_map_public_ips(result: dict[str, Any]) -> None:
    subnets = [r["Properties"] for r in resources(result["template"], "AWS::EC2::Subnet")]
    assert len(subnets) == 4  # public (NAT only) + private, two zones
    assert sorted({s["AvailabilityZoneId"] for s in subnets}) == ["euw1-az1", "euw1-az2"]
    assert all("AvailabilityZone" not in s and not s.get("MapPublicIpOnLaunch", False) for s in subnets)


def test_interface_endpoints_are_private_behind_one_https_group(result: dict[str, Any]) -> None:
    template = result["template"]
    endpoints = [r["Properties"] for r in resources(template, "AWS::EC2::VPCEndpoint")]
    interface = [e for e in endpoints if e.get("VpcEndpointType") == "Interface"]
    assert len(interface) == 4 and all(e["PrivateDnsEnabled"] for e in interface)
    assert len({str(e["SecurityGroupIds"]) for e in interface}) == 1
    assert len(endpoints) == 5  # and the S3 gateway (default)


def test_flow_logs_encrypted_with_the_project_key_and_kept_three_months(result: dict[str, Any]) -> None:
    template = result["template"]
    (key_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    groups = [r for r in resources(template, "AWS::Logs::LogGroup") if r["Properties"].get("RetentionInDays") == 90]
    assert len(groups) == 1
    assert groups[0]["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert groups[0]["DeletionPolicy"] == "RetainExceptOnCreate"
    (flow_log,) = resources(template, "AWS::EC2::FlowLog")
    assert flow_log["Properties"]["TrafficType"] == "ALL"
