"""Lambda function URL handler: forwards an HTTPS request to a SageMaker endpoint (InvokeEndpoint).

The function URL uses IAM auth, so only SigV4-signed callers with lambda:InvokeFunctionUrl reach this code.
Request: POST with the model's payload as the body and its Content-Type (default application/json); an
`Accept` header is passed on. Response: the model's body and content type, or a JSON error with a status
that says whose fault it was (400 the request, 424 the model, 429 throttled, 503 not ready or unavailable:
retry later, 504 the model did not answer in time, 502 anything else).

The SageMaker runtime client makes one attempt with a read timeout below the function's own timeout
(`INVOKE_TIMEOUT_SECONDS`): botocore would otherwise retry a read timeout and run the model again, and the
function would hit its own timeout first and return a bare 502.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
"""InvokeEndpoint's request payload limit for real-time endpoints (6 MB); `MAX_PAYLOAD_BYTES` in the environment
sets the endpoint's own (serverless endpoints take 4 MB)."""

DEFAULT_TIMEOUT_SECONDS = 60
"""Read timeout when `INVOKE_TIMEOUT_SECONDS` is not set (SageMaker's real-time invocation limit)."""

_STATUS = {
    "ValidationError": 400,
    "ModelError": 424,
    "ThrottlingException": 429,
    "ModelNotReadyException": 503,
    "ServiceUnavailable": 503,
}
"""SageMaker runtime error codes -> HTTP status; any other code is 502."""

_client: Any = None


def _timeout() -> int:
    return int(os.environ.get("INVOKE_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))


def _max_payload() -> int:
    return int(os.environ.get("MAX_PAYLOAD_BYTES", MAX_PAYLOAD_BYTES))


def _runtime() -> Any:
    global _client  # one client per container, created on first use (no AWS call at import time)
    if _client is None:
        config = Config(
            connect_timeout=5,
            read_timeout=_timeout(),
            # One attempt: a retried read timeout would run the model again; the caller decides on retries.
            retries={"mode": "standard", "total_max_attempts": 1},
        )
        _client = boto3.client("sagemaker-runtime", config=config)
    return _client


def _error(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"error": message}),
    }


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    method = event.get("requestContext", {}).get("http", {}).get("method", "POST")
    if method != "POST":
        return _error(405, f"use POST, not {method}")
    raw = event.get("body") or ""
    body = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode("utf-8")
    if not body:
        return _error(400, "empty request body; send the model's input as the body")
    if len(body) > _max_payload():
        return _error(413, f"payload of {len(body)} bytes exceeds the endpoint's {_max_payload()} byte limit")
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type", "application/json")
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            json.loads(body)
        except ValueError:
            return _error(400, "the body is not valid JSON; send JSON or set the Content-Type your model expects")
    request: dict[str, Any] = {
        "EndpointName": os.environ["ENDPOINT_NAME"],
        "Body": body,
        "ContentType": content_type,
    }
    if "accept" in headers:
        request["Accept"] = headers["accept"]
    try:
        response = _runtime().invoke_endpoint(**request)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", str(err))
        return _error(_STATUS.get(code, 502), f"{code}: {message}")
    except ReadTimeoutError:
        return _error(504, f"the endpoint did not answer within {_timeout()} s")
    except ConnectTimeoutError:
        return _error(504, "could not connect to the SageMaker runtime API in time")
    except BotoCoreError as err:
        return _error(502, f"calling the SageMaker runtime API failed: {type(err).__name__}")
    payload = response["Body"].read()
    try:
        text, encoded = payload.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(payload).decode("ascii"), True
    return {
        "statusCode": 200,
        "headers": {
            "content-type": response.get("ContentType", "application/octet-stream"),
            "x-invoked-variant": response.get("InvokedProductionVariant", ""),
        },
        "body": text,
        "isBase64Encoded": encoded,
    }
