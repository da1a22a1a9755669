"""Lambda function URL handler: forwards an HTTPS request to a SageMaker endpoint (InvokeEndpoint).

The function URL uses IAM auth, so only SigV4-signed callers with lambda:InvokeFunctionUrl reach this code.
Request: POST with the model's payload as the body and its Content-Type (default application/json); an
`Accept` header is passed on. Response: the model's body and content type, or a JSON error with a status
that says whose fault it was (400 the request, 424 the model, 429 throttled, 502 anything else).
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import boto3
from botocore.exceptions import ClientError

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
"""InvokeEndpoint's request payload limit (6 MB)."""

_client: Any = None


def _runtime() -> Any:
    global _client  # one client per container, created on first use (no AWS call at import time)
    if _client is None:
        _client = boto3.client("sagemaker-runtime")
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
    if len(body) > MAX_PAYLOAD_BYTES:
        return _error(413, f"payload of {len(body)} bytes exceeds SageMaker's {MAX_PAYLOAD_BYTES} byte limit")
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    request: dict[str, Any] = {
        "EndpointName": os.environ["ENDPOINT_NAME"],
        "Body": body,
        "ContentType": headers.get("content-type", "application/json"),
    }
    if "accept" in headers:
        request["Accept"] = headers["accept"]
    try:
        response = _runtime().invoke_endpoint(**request)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", str(err))
        status = {"ValidationError": 400, "ModelError": 424, "ThrottlingException": 429}.get(code, 502)
        return _error(status, f"{code}: {message}")
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
