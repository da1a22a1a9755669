"""NetworkStack / MlVpc: private placement, NAT or isolated, endpoints, flow logs, the project key, AZ pinning."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Match, Template

from mlstack import blueprint
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig
from mlstack.config.network import (
    ADMIN_HOST_INTERFACE_ENDPOINTS,
    INFERENCE_INTERFACE_ENDPOINTS,
    TRAINING_INTERFACE_ENDPOINTS,
)
from mlstack.synth_all import cdk_json_context
from tests.synth import TEST_CONTEXT, Session, template


@pytest.fixture(scope="module")
def default(session: Session) -> Template:
    return template(session, "eks-gpu-training", "NetworkStack")


def _variant(removal: str = "retain", **network: object) -> BlueprintConfig:
    return BlueprintConfig.model_validate(
        {
            "name": "variant",
            "description": "test",
            "env": {"region": "eu-west-1"},
            "removal": removal,
            "network": network,
        }
    )


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Template]:
    """Two non-default networks in one small App: isolated with AZ names; and a `removal: destroy` sandbox with
    endpoints switched off."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("variants")), context={**cdk_json_context(), **TEST_CONTEXT})
    configs = {
        "isolated": _variant(
            availability_zones=["eu-west-1b", "eu-west-1c", "eu-west-1a"],
            nat_gateways=0,
            interface_endpoints=["sts", "ecr.api", "ecr.dkr", "logs"],
            gateway_endpoints=["s3", "dynamodb"],
            flow_logs={"retention_days": 30, "traffic": "REJECT"},
        ),
        "bare": _variant(removal="destroy", interface_endpoints=[], nat_gateways=2),
    }
    stacks = {name: blueprint.build(cdk.Stage(app, name), cfg).network for name, cfg in configs.items()}
    assert stacks["isolated"].termination_protection is True
    assert stacks["bare"].termination_protection is False
    return {name: Template.from_stack(stack) for name, stack in stacks.items()}


def test_project_key_rotates_and_is_retained(default: Template) -> None:
    default.has_resource(
        "AWS::KMS::Key",
        {
            "Properties": {"EnableKeyRotation": True},
            "DeletionPolicy": "RetainExceptOnCreate",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_key_lets_cloudwatch_logs_of_this_account_encrypt(default: Template) -> None:
    default.has_resource_properties(
        "AWS::KMS::Key",
        {
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Sid": "AllowCloudWatchLogs",
                                "Principal": {"Service": "logs.us-east-1.amazonaws.com"},
                                "Condition": {"ArnLike": Match.any_value()},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_flow_logs_go_to_an_encrypted_retained_log_group(default: Template) -> None:
    default.has_resource_properties("AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL"})
    default.has_resource(
        "AWS::Logs::LogGroup",
        {
            "Properties": {
                "RetentionInDays": 365,
                "KmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("ProjectKey"), "Arn"]},
            },
            "DeletionPolicy": "RetainExceptOnCreate",
        },
    )


def test_subnets_are_pinned_by_az_id_and_never_map_public_ips(default: Template) -> None:
    subnets = default.find_resources("AWS::EC2::Subnet")
    assert len(subnets) == 4
    assert sorted(s["Properties"]["AvailabilityZoneId"] for s in subnets.values()) == [
        "use1-az4",
        "use1-az4",
        "use1-az6",
        "use1-az6",
    ]
    assert all("AvailabilityZone" not in s["Properties"] for s in subnets.values())
    assert all(s["Properties"]["MapPublicIpOnLaunch"] is False for s in subnets.values())


def test_one_nat_gateway_and_the_training_interface_endpoints(default: Template) -> None:
    # eks-gpu-training is training-only: what EKS nodes and the admin host use, no SageMaker endpoints.
    default.resource_count_is("AWS::EC2::NatGateway", 1)
    endpoints = default.find_resources("AWS::EC2::VPCEndpoint")
    services = sorted(json.dumps(e["Properties"]["ServiceName"]) for e in endpoints.values())
    expected = [*TRAINING_INTERFACE_ENDPOINTS, *ADMIN_HOST_INTERFACE_ENDPOINTS]
    for suffix in expected:
        assert any(f".{suffix}" in s for s in services), suffix
    assert not any("sagemaker" in s for s in services)
    assert len(services) == len(expected) + 1  # + the S3 gateway
    gateway = [e for e in endpoints.values() if e["Properties"].get("VpcEndpointType") == "Gateway"]
    assert len(gateway) == 1


def test_endpoint_security_group_allows_https_from_the_vpc_only(default: Template) -> None:
    default.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": "Interface VPC endpoints: HTTPS from inside the VPC",
            "SecurityGroupIngress": [{"CidrIp": "10.0.0.0/16", "FromPort": 443, "ToPort": 443, "IpProtocol": "tcp"}],
            "SecurityGroupEgress": [Match.object_like({"CidrIp": "255.255.255.255/32"})],
        },
    )


def test_default_security_group_is_restricted(default: Template) -> None:
    default.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


def test_default_sg_handler_logs_to_an_encrypted_expiring_group_created_first(default: Template) -> None:
    (handler_id,) = default.find_resources("AWS::Lambda::Function")
    groups = default.find_resources("AWS::Logs::LogGroup", {"Properties": {"RetentionInDays": 365}})
    named = {k: g for k, g in groups.items() if handler_id in json.dumps(g["Properties"].get("LogGroupName", ""))}
    ((group_id, group),) = named.items()
    assert "KmsKeyId" in group["Properties"]
    ((_, custom),) = default.find_resources("Custom::VpcRestrictDefaultSG").items()
    assert group_id in custom["DependsOn"]
    skips = default.find_resources("AWS::Lambda::Function")[handler_id]["Metadata"]["checkov"]["skip"]
    assert {s["id"] for s in skips} == {"CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117"}


def test_inference_blueprints_get_only_the_ecr_endpoints_their_hosts_use(session: Session) -> None:
    checked = 0
    for name, bp in session.blueprints.items():
        raw = yaml.safe_load((BLUEPRINTS_DIR / f"{name}.yaml").read_text())
        if bp.config.inference is None or "interface_endpoints" in (raw.get("network") or {}):
            continue  # training-only, or an explicit list (which wins)
        assert bp.config.network.interface_endpoints == list(INFERENCE_INTERFACE_ENDPOINTS), name
        checked += 1
    assert checked or not any(n.startswith("inference-") for n in session.blueprints)


def test_isolated_network_has_no_nat_no_igw_no_public_subnets(variants: dict[str, Template]) -> None:
    t = variants["isolated"]
    t.resource_count_is("AWS::EC2::NatGateway", 0)
    t.resource_count_is("AWS::EC2::InternetGateway", 0)
    t.resource_count_is("AWS::EC2::Subnet", 3)
    t.resource_count_is("AWS::EC2::Route", 0)


def test_az_names_are_used_in_the_given_order(variants: dict[str, Template]) -> None:
    subnets = variants["isolated"].find_resources("AWS::EC2::Subnet")
    zones = [s["Properties"]["AvailabilityZone"] for s in subnets.values()]
    assert zones == ["eu-west-1b", "eu-west-1c", "eu-west-1a"]


def test_endpoint_set_and_flow_log_settings_are_configurable(variants: dict[str, Template]) -> None:
    t = variants["isolated"]
    t.resource_count_is("AWS::EC2::VPCEndpoint", 6)
    t.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "REJECT"})
    t.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_no_interface_endpoints_means_no_endpoint_security_group(variants: dict[str, Template]) -> None:
    t = variants["bare"]
    t.resource_count_is("AWS::EC2::NatGateway", 2)
    t.resource_count_is("AWS::EC2::VPCEndpoint", 1)
    t.resource_count_is("AWS::EC2::SecurityGroup", 0)


def test_stack_name_carries_the_blueprint_and_synth_needs_no_lookup(session: Session) -> None:
    stack = session.blueprints["eks-gpu-training"].stacks["NetworkStack"]
    assert stack.stack_name == "eks-gpu-training-NetworkStack"
    manifest = (Path(session.outdir) / "assembly-eks-gpu-training" / "manifest.json").read_text()
    assert '"missing"' not in manifest  # no context lookups were requested


def test_network_stack_has_termination_protection_unless_a_sandbox(session: Session) -> None:
    for bp in session.blueprints.values():
        assert bp.stacks["NetworkStack"].termination_protection is bp.config.retain, bp.name


def test_a_destroy_sandbox_deletes_its_key_and_logs_with_the_stack(variants: dict[str, Template]) -> None:
    t = variants["bare"]
    t.has_resource("AWS::KMS::Key", {"DeletionPolicy": "Delete", "Properties": {"PendingWindowInDays": 7}})
    t.has_resource("AWS::Logs::LogGroup", {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"})
