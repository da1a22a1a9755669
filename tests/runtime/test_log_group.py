"""runtime/log_group/handler.py under moto's CloudWatch Logs and KMS: the group Fluent Bit already created (no
retention, no key) is taken over instead of failing with "already exists"; a missing group is created; Delete
keeps the group; every path answers CloudFormation (the PUT to the response URL is captured). moto has no
AssociateKmsKey: the test records that call on the real client object (name and key) and checks it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from runtime.log_group import handler

REGION = "us-east-1"
NAME = "/aws/containerinsights/eks-gpu-training-cluster/application"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    answers: list[dict[str, Any]] = []

    class Answer:
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def read(self) -> bytes:
            return b""

    def urlopen(request: Any, timeout: int) -> Answer:
        assert request.get_method() == "PUT" and request.full_url == "https://cloudformation-response.example/x"
        answers.append(json.loads(request.data))
        return Answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    with mock_aws():
        yield answers


def _event(request_type: str, key: str, days: int = 365) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResponseURL": "https://cloudformation-response.example/x",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
        "RequestId": "r-1",
        "LogicalResourceId": "ObservabilityStepLogGroup",
        "ResourceProperties": {"LogGroupName": NAME, "KmsKeyArn": key, "RetentionInDays": str(days)},
        **({"PhysicalResourceId": NAME} if request_type != "Create" else {}),
    }


def _group() -> dict[str, Any]:
    groups = boto3.client("logs", region_name=REGION).describe_log_groups(logGroupNamePrefix=NAME)["logGroups"]
    assert len(groups) == 1
    return dict(groups[0])


@pytest.fixture
def associated(aws: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    calls: list[dict[str, str]] = []
    make = boto3.client

    def client(service: str, **kwargs: Any) -> Any:
        made = make(service, **kwargs)
        made.associate_kms_key = lambda **call: calls.append(call)
        return made

    monkeypatch.setattr(boto3, "client", client)
    return calls


def _key() -> str:
    return str(boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"])


def test_the_group_fluent_bit_created_is_taken_over(
    aws: list[dict[str, Any]], associated: list[dict[str, str]]
) -> None:
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=NAME)  # Fluent Bit's: no key, no retention
    key = _key()
    handler.handler(_event("Create", key), None)
    assert aws[-1]["Status"] == "SUCCESS", aws[-1]
    assert aws[-1]["PhysicalResourceId"] == NAME
    assert associated == [{"logGroupName": NAME, "kmsKeyId": key}]
    assert _group().get("retentionInDays") == 365


def test_a_missing_group_is_created_with_the_key_and_an_update_sets_the_new_retention(
    aws: list[dict[str, Any]], associated: list[dict[str, str]]
) -> None:
    key = _key()
    handler.handler(_event("Create", key), None)
    assert associated == []  # created with the key: nothing to associate
    handler.handler(_event("Update", key, days=30), None)
    assert [a["Status"] for a in aws] == ["SUCCESS", "SUCCESS"], aws
    assert associated == [{"logGroupName": NAME, "kmsKeyId": key}]  # the update found it: key set again
    group = _group()
    assert (group.get("kmsKeyId"), group.get("retentionInDays")) == (key, 30)


def test_delete_keeps_the_group_and_its_logs(aws: list[dict[str, Any]], associated: list[dict[str, str]]) -> None:
    key = _key()
    handler.handler(_event("Create", key), None)
    handler.handler(_event("Delete", key), None)
    assert [a["Status"] for a in aws] == ["SUCCESS", "SUCCESS"]
    assert _group()["logGroupName"] == NAME


def test_a_failed_call_answers_failed_with_its_reason(
    aws: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the answer CloudFormation waits an hour for the resource; with it the deploy fails at once.
    make = boto3.client

    def denied(service: str, **kwargs: Any) -> Any:
        made = make(service, **kwargs)
        error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized: logs:CreateLogGroup"}}
        made.create_log_group = lambda **_: (_ for _ in ()).throw(ClientError(error, "CreateLogGroup"))
        return made

    monkeypatch.setattr(boto3, "client", denied)
    handler.handler(_event("Create", _key()), None)
    assert aws[-1]["Status"] == "FAILED"
    assert aws[-1]["Reason"].startswith("ClientError: An error occurred (AccessDeniedException)"), aws[-1]
