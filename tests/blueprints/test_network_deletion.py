"""Deleting the NetworkStack keeps the project key and the flow-log data (run against moto's CloudFormation)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.synth import Session

REGION = "us-east-1"
_MOTO_CANNOT_DELETE = frozenset({"AWS::Lambda::Function"})  # moto runs Lambda code in Docker


def _deployable_in_moto(template: dict[str, Any]) -> dict[str, Any]:
    """Drop what moto cannot run: CDK's bootstrap-version check, the custom resource whose Lambda needs Docker (and
    what refers to that function, such as its log group), and tags (moto 5.2.5's KMS CloudFormation handler
    expects TagKey/TagValue and raises on Key/Value). moto 5.2.5 keeps only resources whose DeletionPolicy is
    `Retain` (cloudformation/parsing.py): `RetainExceptOnCreate` is written as `Retain`, which is what
    CloudFormation applies to it when a stack whose create completed is deleted."""
    result = copy.deepcopy(template)
    result.pop("Rules", None)
    result.get("Parameters", {}).pop("BootstrapVersion", None)
    dropped = {
        logical_id
        for logical_id, resource in result["Resources"].items()
        if resource["Type"].startswith("Custom::") or resource["Type"] in _MOTO_CANNOT_DELETE
    }
    while True:
        refers = {
            logical_id
            for logical_id, resource in result["Resources"].items()
            if logical_id not in dropped
            and any(
                f'{{"Ref": "{d}"}}' in json.dumps(resource.get("Properties", {}))
                or f'"Fn::GetAtt": ["{d}"' in json.dumps(resource.get("Properties", {}))
                for d in dropped
            )
        }
        if not refers:
            break
        dropped |= refers
    for logical_id in dropped:
        del result["Resources"][logical_id]
    for resource in result["Resources"].values():
        resource.get("Properties", {}).pop("Tags", None)
        if resource.get("DeletionPolicy") == "RetainExceptOnCreate":
            resource["DeletionPolicy"] = "Retain"
        depends = resource.get("DependsOn")
        if isinstance(depends, list):
            resource["DependsOn"] = [d for d in depends if d not in dropped]
    return result


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.mark.usefixtures("aws")
@pytest.mark.filterwarnings("ignore:Exception\\(DependencyViolationError\\):UserWarning")  # moto's own error shape
def test_deleting_the_network_stack_keeps_the_key_and_flow_logs(session: Session) -> None:
    if "eks-gpu-training" not in session.blueprints:  # a MLSTACK_TEST_BLUEPRINTS selection without it
        pytest.skip("eks-gpu-training is not in this session")
    network = session.blueprints["eks-gpu-training"]
    template = _deployable_in_moto(network.templates["NetworkStack"])
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="net", TemplateBody=json.dumps(template), Capabilities=["CAPABILITY_IAM"])
    resources = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.list_stack_resources(StackName="net")["StackResourceSummaries"]
    }
    key_id = resources["ProjectKeyFDD03260"]
    log_group = resources["NetworkFlowLogGroup4F8CEEEF"]
    role_name = resources["NetworkVpcFlowLogIAMRole654CF7A1"]

    try:
        cfn.delete_stack(StackName="net")
    except ClientError as err:
        # moto 5.2.5 deletes the VPC before some of its dependants and reports DependencyViolation after
        # deleting everything else it can (`cdk destroy` against moto_server fails the same way).
        assert err.response["Error"]["Code"] == "DependencyViolation", err

    # (list_keys, not describe_key: moto stores a CloudFormation KeyPolicy as a dict and describe_key chokes on it)
    assert key_id in [k["KeyId"] for k in boto3.client("kms", region_name=REGION).list_keys()["Keys"]]
    groups = boto3.client("logs", region_name=REGION).describe_log_groups(logGroupNamePrefix=log_group)["logGroups"]
    assert [g["logGroupName"] for g in groups] == [log_group]
    # The control: what is not retained is really gone.
    roles = [r["RoleName"] for r in boto3.client("iam", region_name=REGION).list_roles()["Roles"]]
    assert role_name not in roles
