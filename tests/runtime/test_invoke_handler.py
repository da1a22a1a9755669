"""runtime/invoke/handler.py against moto's SageMaker (the endpoint and InvokeEndpoint) and botocore's Stubber."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber
from moto import mock_aws

from runtime.invoke import handler

REGION = "us-east-1"
ENDPOINT = "chat-endpoint"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto endpoint (an old instance type: moto rejects ml.g5 and newer in CreateEndpointConfig)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    monkeypatch.setattr(handler, "_client", None)
    with mock_aws():
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        sagemaker.create_model(
            ModelName="m",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/sm",
            PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"},
        )
        sagemaker.create_endpoint_config(
            EndpointConfigName="c",
            ProductionVariants=[
                {"VariantName": "g5", "ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}
            ],
        )
        sagemaker.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="c")
        yield ENDPOINT


def _queue_result(body: str, content_type: str = "application/json", variant: str = "g5") -> None:
    """moto's documented way to script InvokeEndpoint answers."""
    result = {"Body": body, "ContentType": content_type, "InvokedProductionVariant": variant, "CustomAttributes": ""}
    response = requests.post(
        "http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results",
        json={"account_id": "123456789012", "region": REGION, "results": [result]},
        timeout=5,
    )
    assert response.status_code == 201, response.text


def _event(body: str | bytes, *, method: str = "POST", headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "requestContext": {"http": {"method": method}},
        "headers": headers or {"Content-Type": "application/json"},
        "body": base64.b64encode(body).decode() if isinstance(body, bytes) else body,
        "isBase64Encoded": isinstance(body, bytes),
    }


def test_forwards_the_body_and_returns_the_model_answer(endpoint: str) -> None:
    _queue_result('{"generated_text": "hi"}', variant="g5")
    response = handler.handler(_event('{"inputs": "hello"}'), None)
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"generated_text": "hi"}
    assert response["headers"] == {"content-type": "application/json", "x-invoked-variant": "g5"}
    assert response["isBase64Encoded"] is False


def test_base64_request_bodies_are_decoded(endpoint: str) -> None:
    _queue_result("ok", content_type="text/plain")
    response = handler.handler(_event(b"\x00\x01binary", headers={"content-type": "application/octet-stream"}), None)
    assert (response["statusCode"], response["body"]) == (200, "ok")


def test_refuses_other_methods_and_empty_or_oversized_bodies(endpoint: str) -> None:
    assert handler.handler(_event("{}", method="GET"), None)["statusCode"] == 405
    assert handler.handler(_event(""), None)["statusCode"] == 400
    too_big = b"x" * (handler.MAX_PAYLOAD_BYTES + 1)
    response = handler.handler(_event(too_big), None)
    assert response["statusCode"] == 413
    assert "6291456 byte limit" in json.loads(response["body"])["error"]


def test_a_serverless_endpoint_gets_its_own_smaller_payload_limit(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Serverless endpoints take 4 MB, not the real-time 6 MB: the stack sets MAX_PAYLOAD_BYTES.
    monkeypatch.setenv("MAX_PAYLOAD_BYTES", str(4 * 1024 * 1024))
    response = handler.handler(_event(b"x" * (4 * 1024 * 1024 + 1)), None)
    assert response["statusCode"] == 413
    assert "4194304 byte limit" in json.loads(response["body"])["error"]


@pytest.mark.parametrize(
    ("code", "status"), [("ValidationError", 400), ("ModelError", 424), ("ThrottlingException", 429), ("Boom", 502)]
)
def test_maps_sagemaker_errors_to_http_statuses(monkeypatch: pytest.MonkeyPatch, code: str, status: int) -> None:
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    client = boto3.client("sagemaker-runtime", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_client_error("invoke_endpoint", service_error_code=code, service_message="nope")
    monkeypatch.setattr(handler, "_client", client)
    with stubber:
        response = handler.handler(_event('{"inputs": 1}', headers={"Accept": "application/json"}), None)
    assert response["statusCode"] == status
    assert json.loads(response["body"]) == {"error": f"{code}: nope"}


def test_passes_content_type_and_accept_to_invoke_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    client = boto3.client("sagemaker-runtime", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_response(
        "invoke_endpoint",
        {"Body": _streaming(b"\xff\xfe"), "ContentType": "application/x-npy"},
        {"EndpointName": ENDPOINT, "Body": b"1,2", "ContentType": "text/csv", "Accept": "application/x-npy"},
    )
    monkeypatch.setattr(handler, "_client", client)
    with stubber:
        response = handler.handler(
            _event("1,2", headers={"Content-Type": "text/csv", "Accept": "application/x-npy"}), None
        )
    # Binary answers come back base64-encoded, as function URLs expect.
    assert response["isBase64Encoded"] is True
    assert base64.b64decode(response["body"]) == b"\xff\xfe"


def _streaming(data: bytes) -> Any:
    from io import BytesIO

    from botocore.response import StreamingBody

    return StreamingBody(BytesIO(data), len(data))


@pytest.mark.parametrize(("code", "status"), [("ServiceUnavailable", 503), ("ModelNotReadyException", 503)])
def test_unavailable_or_not_ready_endpoints_answer_503_so_callers_retry(
    monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    client = boto3.client("sagemaker-runtime", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_client_error("invoke_endpoint", service_error_code=code, service_message="later")
    monkeypatch.setattr(handler, "_client", client)
    with stubber:
        response = handler.handler(_event('{"inputs": 1}'), None)
    assert response["statusCode"] == status


class _Failing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def invoke_endpoint(self, **_: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (ReadTimeoutError(endpoint_url="https://runtime"), 504, "the endpoint did not answer within 55 s"),
        (ConnectTimeoutError(endpoint_url="https://runtime"), 504, "could not connect"),
        (EndpointConnectionError(endpoint_url="https://runtime"), 502, "EndpointConnectionError"),
    ],
    ids=["read-timeout", "connect-timeout", "no-connection"],
)
def test_timeouts_and_connection_errors_are_json_errors_not_crashes(
    monkeypatch: pytest.MonkeyPatch, error: Exception, status: int, message: str
) -> None:
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    monkeypatch.setenv("INVOKE_TIMEOUT_SECONDS", "55")
    monkeypatch.setattr(handler, "_client", _Failing(error))
    response = handler.handler(_event('{"inputs": 1}'), None)
    assert response["statusCode"] == status
    assert message in json.loads(response["body"])["error"]


def test_the_client_tries_once_with_the_read_timeout_the_stack_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore retries read timeouts by default: that would run the model again for one request.
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("INVOKE_TIMEOUT_SECONDS", "115")
    monkeypatch.setattr(handler, "_client", None)
    config = handler._runtime().meta.config
    assert (config.read_timeout, config.connect_timeout) == (115, 5)
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}


def test_a_json_content_type_with_a_body_that_is_not_json_is_a_400(monkeypatch: pytest.MonkeyPatch) -> None:
    # Refused before the endpoint runs (and bills) the request; other content types pass through as bytes.
    monkeypatch.setenv("ENDPOINT_NAME", ENDPOINT)
    monkeypatch.setattr(handler, "_client", _Failing(AssertionError("InvokeEndpoint must not be called")))
    for headers in ({"content-type": "application/json"}, {"content-type": "application/json; charset=utf-8"}, {}):
        response = handler.handler(_event("{not json", headers=headers or {"x": "y"}), None)
        assert response["statusCode"] == 400, headers
        assert "not valid JSON" in json.loads(response["body"])["error"]
