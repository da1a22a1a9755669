"""API Gateway (HTTP API, payload 2.0) handler: one `POST /<service>/<action>` route per enabled operation.

Only the operations in `OPERATIONS` answer (the function's role may call only those). Every request body is
JSON; sizes are checked against each service's documented limit before the call, so an oversized input gets
a 413 naming the limit instead of a service error. Service errors map to a status that says whose fault it
was: 400 the request, 409 a name in use, 429 throttled (retry with backoff), 503/504 the service (retry
later), 502 anything else (including this function lacking a permission).

Environment: OPERATIONS (comma list), LANGUAGE, TIMEOUT_SECONDS (the function's timeout), and per service:
BEDROCK_MODEL_IDS, BEDROCK_MAX_TOKENS, GUARDRAIL_ID, GUARDRAIL_VERSION; MEDIA_BUCKET, MEDIA_PREFIX,
TRANSCRIPT_PREFIX, OUTPUT_KEY_ID (Transcribe).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

# Input limits, from each service's API reference / quotas page.
COMPREHEND_SENTIMENT_MAX_BYTES = 5_000
"""DetectSentiment: 5 KB of UTF-8 text (Amazon Comprehend Guidelines and quotas)."""
COMPREHEND_MAX_BYTES = 100_000
"""DetectEntities / DetectPiiEntities: 100 KB of UTF-8 text (Amazon Comprehend Guidelines and quotas)."""
TRANSLATE_MAX_BYTES = 10_000
"""TranslateText: 10,000 bytes of text (Amazon Translate API reference, TranslateText Text)."""
REKOGNITION_MAX_BYTES = 5 * 1024 * 1024
"""Image bytes passed directly: 5 MB (Amazon Rekognition Image API, Image.Bytes)."""
TEXTRACT_MAX_BYTES = 10 * 1024 * 1024
"""Synchronous AnalyzeDocument bytes: 10 MB (Amazon Textract quotas). The Lambda request limit (6 MB) is lower."""
BEDROCK_MAX_PROMPT_CHARS = 100_000
"""This API's own bound on a prompt (not a Bedrock limit): keeps one request's token bill predictable."""

_STATUS = {
    "ValidationException": 400,
    "InvalidRequestException": 400,
    "InvalidParameterException": 400,
    "TextSizeLimitExceededException": 413,
    "UnsupportedLanguageException": 400,
    "DetectedLanguageLowConfidenceException": 400,
    "UnsupportedLanguagePairException": 400,
    "InvalidImageFormatException": 400,
    "ImageTooLargeException": 413,
    "BadDocumentException": 400,
    "DocumentTooLargeException": 413,
    "UnsupportedDocumentException": 400,
    "BadRequestException": 400,
    "ConflictException": 409,
    "ThrottlingException": 429,
    "TooManyRequestsException": 429,
    "ProvisionedThroughputExceededException": 429,
    "LimitExceededException": 429,
    "ServiceQuotaExceededException": 429,
    "ServiceUnavailableException": 503,
    "InternalServerException": 503,
    "InternalServerError": 503,
    "InternalFailure": 503,
    "ModelNotReadyException": 503,
    "ModelTimeoutException": 504,
}
"""Service error code -> HTTP status; any other code (AccessDeniedException included) is 502."""

CONNECT_TIMEOUT_SECONDS = 2
MARGIN_SECONDS = 2
"""Left of the function's timeout (TIMEOUT_SECONDS) after the service call, to answer with a mapped error."""
_clients: dict[str, Any] = {}


def client_config(service: str, timeout_seconds: int) -> Config:
    """The client settings that keep every call inside the function's `timeout_seconds`.

    Bedrock: one attempt (`total_max_attempts` 1), read timeout = the function's timeout less the connect
    timeout and a margin. A generation that times out on the read has been billed for; a retry would bill it
    again and could not finish before the function is stopped anyway (botocore "Retries" guide, standard
    mode; Config `read_timeout`). The other services answer in well under a second: three attempts (standard
    mode), each with a read timeout that fits three times in the same budget.
    """
    budget = max(1, timeout_seconds - CONNECT_TIMEOUT_SECONDS - MARGIN_SECONDS)
    if service == "bedrock-runtime":
        return Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=budget,
        )
    return Config(
        retries={"mode": "standard", "total_max_attempts": 3},
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=max(1, budget // 3 - CONNECT_TIMEOUT_SECONDS),
    )


class RequestError(Exception):
    """A bad request: answered with `status` and `message`, no service call made."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _client(service: str) -> Any:
    if service not in _clients:  # one client per container, created on first use (no AWS call at import)
        timeout = int(os.environ.get("TIMEOUT_SECONDS", "25"))
        _clients[service] = boto3.client(service, config=client_config(service, timeout))
    return _clients[service]


def _response(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}


def _text(body: dict[str, Any], field: str, limit: int) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value.strip():
        raise RequestError(400, f"'{field}' must be a non-empty string")
    size = len(value.encode("utf-8"))
    if size > limit:
        raise RequestError(413, f"'{field}' is {size} bytes; the service accepts at most {limit} bytes")
    return value


def _bytes(body: dict[str, Any], field: str, limit: int) -> bytes:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise RequestError(400, f"'{field}' must be a base64-encoded string")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"'{field}' is not valid base64") from None
    if len(data) > limit:
        raise RequestError(413, f"'{field}' is {len(data)} bytes; the service accepts at most {limit} bytes")
    return data


def _language() -> str:
    return os.environ.get("LANGUAGE", "en")


def comprehend_sentiment(body: dict[str, Any]) -> dict[str, Any]:
    text = _text(body, "text", COMPREHEND_SENTIMENT_MAX_BYTES)
    out = _client("comprehend").detect_sentiment(Text=text, LanguageCode=_language())
    return {"sentiment": out["Sentiment"], "scores": out["SentimentScore"]}


def comprehend_entities(body: dict[str, Any]) -> dict[str, Any]:
    text = _text(body, "text", COMPREHEND_MAX_BYTES)
    out = _client("comprehend").detect_entities(Text=text, LanguageCode=_language())
    return {"entities": out["Entities"]}


def comprehend_pii(body: dict[str, Any]) -> dict[str, Any]:
    text = _text(body, "text", COMPREHEND_MAX_BYTES)
    out = _client("comprehend").detect_pii_entities(Text=text, LanguageCode=_language())
    return {"entities": out["Entities"]}


_LANG = re.compile(r"^([a-z]{2,3}(-[A-Za-z]{2,4})?|auto)$")


def translate_text(body: dict[str, Any]) -> dict[str, Any]:
    text = _text(body, "text", TRANSLATE_MAX_BYTES)
    source = body.get("source_language", "auto")
    target = body.get("target_language")
    for name, value in (("source_language", source), ("target_language", target)):
        if not isinstance(value, str) or not _LANG.match(value):
            raise RequestError(400, f"'{name}' must be a language code such as 'en' or 'fr-CA'")
    if target == "auto":
        raise RequestError(400, "'target_language' cannot be 'auto'; name the language to translate into")
    out = _client("translate").translate_text(Text=text, SourceLanguageCode=source, TargetLanguageCode=target)
    return {"text": out["TranslatedText"], "source_language": out["SourceLanguageCode"]}


def rekognition_labels(body: dict[str, Any]) -> dict[str, Any]:
    image = _bytes(body, "image", REKOGNITION_MAX_BYTES)
    out = _client("rekognition").detect_labels(Image={"Bytes": image}, MaxLabels=50)
    return {"labels": [{"name": x["Name"], "confidence": x["Confidence"]} for x in out["Labels"]]}


def rekognition_moderation(body: dict[str, Any]) -> dict[str, Any]:
    image = _bytes(body, "image", REKOGNITION_MAX_BYTES)
    out = _client("rekognition").detect_moderation_labels(Image={"Bytes": image})
    return {"labels": [{"name": x["Name"], "confidence": x["Confidence"]} for x in out["ModerationLabels"]]}


def rekognition_text(body: dict[str, Any]) -> dict[str, Any]:
    image = _bytes(body, "image", REKOGNITION_MAX_BYTES)
    out = _client("rekognition").detect_text(Image={"Bytes": image})
    return {"lines": [x["DetectedText"] for x in out["TextDetections"] if x["Type"] == "LINE"]}


def textract_analyze(body: dict[str, Any]) -> dict[str, Any]:
    document = _bytes(body, "document", TEXTRACT_MAX_BYTES)
    features = body.get("features", ["TABLES", "FORMS"])
    if not isinstance(features, list) or not features or not set(features) <= {"TABLES", "FORMS", "LAYOUT"}:
        raise RequestError(400, "'features' must be a non-empty list of TABLES, FORMS, LAYOUT")
    out = _client("textract").analyze_document(Document={"Bytes": document}, FeatureTypes=features)
    return {"pages": out["DocumentMetadata"]["Pages"], "blocks": out["Blocks"]}


_JOB = re.compile(r"^[0-9a-zA-Z._-]{1,200}$")
_KEY = re.compile(r"^[A-Za-z0-9!_.*'()/-]{1,900}$")


def transcribe_start(body: dict[str, Any]) -> dict[str, Any]:
    job, key, language = body.get("job_name"), body.get("media_key"), body.get("language_code")
    if not isinstance(job, str) or not _JOB.match(job):
        raise RequestError(400, "'job_name' must be 1-200 characters of letters, digits, '.', '_' or '-'")
    prefix = os.environ["MEDIA_PREFIX"]
    if not isinstance(key, str) or not _KEY.match(key) or ".." in key:
        raise RequestError(400, f"'media_key' must be an object key under {prefix}")
    if not isinstance(language, str) or not re.match(r"^[a-z]{2}-[A-Z]{2}$", language):
        raise RequestError(400, "'language_code' must be a Transcribe language code such as 'en-US'")
    bucket = os.environ["MEDIA_BUCKET"]
    out = _client("transcribe").start_transcription_job(
        TranscriptionJobName=job,
        LanguageCode=language,
        Media={"MediaFileUri": f"s3://{bucket}/{prefix}{key}"},
        OutputBucketName=bucket,
        OutputKey=f"{os.environ['TRANSCRIPT_PREFIX']}{job}.json",
        OutputEncryptionKMSKeyId=os.environ["OUTPUT_KEY_ID"],
    )
    return {"job_name": job, "status": out["TranscriptionJob"]["TranscriptionJobStatus"]}


def bedrock_converse(body: dict[str, Any]) -> dict[str, Any]:
    models = os.environ["BEDROCK_MODEL_IDS"].split(",")
    model = body.get("model_id", models[0])
    if model not in models:
        raise RequestError(400, f"'model_id' {model!r} is not enabled here; use one of {', '.join(models)}")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RequestError(400, "'prompt' must be a non-empty string")
    if len(prompt) > BEDROCK_MAX_PROMPT_CHARS:
        raise RequestError(413, f"'prompt' is {len(prompt)} characters; this API accepts {BEDROCK_MAX_PROMPT_CHARS}")
    ceiling = int(os.environ.get("BEDROCK_MAX_TOKENS", "1024"))
    max_tokens = body.get("max_tokens", ceiling)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= ceiling:
        raise RequestError(400, f"'max_tokens' must be a whole number from 1 to {ceiling}")
    request: dict[str, Any] = {
        "modelId": model,
        "messages": [{"role": "user", "content": [{"text": prompt}]}],
        "inferenceConfig": {"maxTokens": max_tokens},
    }
    if os.environ.get("GUARDRAIL_ID"):
        request["guardrailConfig"] = {
            "guardrailIdentifier": os.environ["GUARDRAIL_ID"],
            "guardrailVersion": os.environ["GUARDRAIL_VERSION"],
        }
    out = _client("bedrock-runtime").converse(**request)
    text = "".join(part.get("text", "") for part in out["output"]["message"]["content"])
    return {"text": text, "stop_reason": out["stopReason"], "usage": out["usage"]}


OPERATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "comprehend.sentiment": comprehend_sentiment,
    "comprehend.entities": comprehend_entities,
    "comprehend.pii": comprehend_pii,
    "translate.text": translate_text,
    "rekognition.labels": rekognition_labels,
    "rekognition.moderation": rekognition_moderation,
    "rekognition.text": rekognition_text,
    "textract.analyze": textract_analyze,
    "transcribe.start": transcribe_start,
    "bedrock.converse": bedrock_converse,
}


def route_path(operation: str) -> str:
    """`comprehend.sentiment` -> `/comprehend/sentiment` (the construct and this handler share it)."""
    return "/" + operation.replace(".", "/")


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    method = event.get("requestContext", {}).get("http", {}).get("method", "")
    path = event.get("rawPath", "")
    enabled = [op for op in os.environ.get("OPERATIONS", "").split(",") if op]
    operation = next((op for op in enabled if route_path(op) == path), None)
    if operation is None:
        return _response(404, {"error": f"no operation at {path}; enabled: {', '.join(map(route_path, enabled))}"})
    if method != "POST":
        return _response(405, {"error": f"use POST, not {method}"})
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw).decode("utf-8") if event.get("isBase64Encoded") else raw
        body = json.loads(text)
    except (ValueError, binascii.Error):
        return _response(400, {"error": "the body is not valid JSON"})
    if not isinstance(body, dict):
        return _response(400, {"error": "the body must be a JSON object"})
    try:
        return _response(200, OPERATIONS[operation](body))
    except RequestError as err:
        return _response(err.status, {"error": err.message})
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", "")
        return _response(_STATUS.get(code, 502), {"error": f"{code}: {message}"})
    except BotoCoreError as err:
        return _response(502, {"error": f"calling the service failed: {type(err).__name__}"})
