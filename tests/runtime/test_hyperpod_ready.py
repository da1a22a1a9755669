"""runtime/hyperpod_ready/handler.py against botocore's Stubber (moto has no HyperPod): the wait completes on
AutoScaling.Status InService, keeps waiting while Creating, fails with the service's message on Failed, and Delete
calls nothing. Each answer is a DescribeCluster response that botocore's SageMaker model validates."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from runtime.hyperpod_ready import handler

NAME = "hyperpod-eks-teams"
ARN = f"arn:aws:sagemaker:us-east-1:123456789012:cluster/{NAME}-abc123"
EVENT = {"RequestType": "Create", "ResourceProperties": {"ServiceToken": "x", "ClusterArn": ARN}}


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERPOD_CLUSTER", NAME)


def _described(status: str | None, **autoscaling: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "ClusterArn": ARN,
        "ClusterName": NAME,
        "ClusterStatus": "InService",
        "CreationTime": datetime(2026, 12, 1, tzinfo=UTC),
        "InstanceGroups": [],
    }
    if status is not None:
        answer["AutoScaling"] = {"Mode": "Enable", "AutoScalerType": "Karpenter", "Status": status, **autoscaling}
    return answer


def _client(*answers: dict[str, Any]) -> tuple[Any, Stubber]:
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for answer in answers:
        stub.add_response("describe_cluster", answer, {"ClusterName": NAME})
    stub.activate()
    return client, stub


def test_in_service_completes() -> None:
    client, stub = _client(_described("InService"))
    assert handler.is_complete(EVENT, None, client)["IsComplete"] is True
    stub.assert_no_pending_responses()


def test_creating_waits_then_in_service_completes() -> None:
    client, stub = _client(_described("Creating"), _described("Creating"), _described("InService"))
    answers = [handler.is_complete(EVENT, None, client)["IsComplete"] for _ in range(3)]
    assert answers == [False, False, True]
    stub.assert_no_pending_responses()


def test_no_autoscaling_status_yet_waits() -> None:
    client, _ = _client(_described(None))
    assert handler.is_complete(EVENT, None, client)["IsComplete"] is False


def test_failed_raises_with_the_service_message() -> None:
    client, _ = _client(_described("Failed", FailureMessage="ClusterRole cannot be assumed"))
    with pytest.raises(RuntimeError, match=f"{NAME}: autoscaling Failed: ClusterRole cannot be assumed"):
        handler.is_complete(EVENT, None, client)


def test_disabled_autoscaling_raises() -> None:
    described = _described("InService")
    described["AutoScaling"] = {"Mode": "Disable", "Status": "InService"}
    client, _ = _client(described)
    with pytest.raises(RuntimeError, match="autoscaling is disabled"):
        handler.is_complete(EVENT, None, client)


def test_delete_calls_nothing() -> None:
    client, stub = _client()
    delete = {**EVENT, "RequestType": "Delete", "PhysicalResourceId": f"{NAME}-autoscaling-ready"}
    assert handler.is_complete(delete, None, client) == {"IsComplete": True}
    assert handler.on_event(delete, None) == {"PhysicalResourceId": f"{NAME}-autoscaling-ready"}
    stub.assert_no_pending_responses()


def test_create_names_the_wait_after_its_cluster() -> None:
    assert handler.on_event(EVENT, None) == {"PhysicalResourceId": f"{NAME}-autoscaling-ready"}
