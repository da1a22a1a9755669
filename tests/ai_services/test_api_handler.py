"""runtime/ai_services/api_handler.py: validation, size limits and error mapping, with botocore's Stubber
(moto has no Translate, Bedrock runtime or Textract AnalyzeDocument), and moto where it covers the call."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from botocore.stub import Stubber

from mlstack.constructs.ai_services.api import OPERATIONS, route_path
from runtime.ai_services import api_handler as h

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("OPERATIONS", ",".join(OPERATIONS))
    monkeypatch.setenv("LANGUAGE", "en")
    monkeypatch.setenv("BEDROCK_MODEL_IDS", "amazon.nova-lite-v1:0,amazon.nova-micro-v1:0")
    monkeypatch.setenv("BEDROCK_MAX_TOKENS", "512")
    monkeypatch.setenv("MEDIA_BUCKET", "media-bucket")
    monkeypatch.setenv("MEDIA_PREFIX", "media/")
    monkeypatch.setenv("TRANSCRIPT_PREFIX", "transcripts/")
    monkeypatch.setenv("OUTPUT_KEY_ID", "arn:aws:kms:us-east-1:123456789012:key/k")
    monkeypatch.setattr(h, "_clients", {})
    yield


def _stub(service: str) -> Stubber:
    client = boto3.client(service, region_name=REGION)
    h._clients[service] = client
    stubber = Stubber(client)
    stubber.activate()
    return stubber


def _call(operation: str, body: Any, method: str = "POST", raw: str | None = None) -> tuple[int, dict[str, Any]]:
    event = {
        "rawPath": route_path(operation),
        "requestContext": {"http": {"method": method}},
        "body": raw if raw is not None else json.dumps(body),
    }
    response = h.handler(event, None)
    return response["statusCode"], json.loads(response["body"])


def test_route_paths_match_the_construct() -> None:
    assert set(h.OPERATIONS) == set(OPERATIONS)
    assert all(h.route_path(op) == route_path(op) for op in OPERATIONS)


def test_sentiment_calls_comprehend_in_the_configured_language() -> None:
    stub = _stub("comprehend")
    stub.add_response(
        "detect_sentiment",
        {"Sentiment": "POSITIVE", "SentimentScore": {"Positive": 0.9, "Negative": 0.0, "Neutral": 0.1, "Mixed": 0.0}},
        {"Text": "great product", "LanguageCode": "en"},
    )
    status, body = _call("comprehend.sentiment", {"text": "great product"})
    assert (status, body["sentiment"]) == (200, "POSITIVE")
    stub.assert_no_pending_responses()


def test_entities_and_pii() -> None:
    stub = _stub("comprehend")
    entity = {"Type": "PERSON", "Text": "Ana", "Score": 0.99, "BeginOffset": 0, "EndOffset": 3}
    stub.add_response("detect_entities", {"Entities": [entity]}, {"Text": "Ana paid", "LanguageCode": "en"})
    pii = {"Type": "NAME", "Score": 0.99, "BeginOffset": 0, "EndOffset": 3}
    stub.add_response("detect_pii_entities", {"Entities": [pii]}, {"Text": "Ana paid", "LanguageCode": "en"})
    assert _call("comprehend.entities", {"text": "Ana paid"}) == (200, {"entities": [entity]})
    assert _call("comprehend.pii", {"text": "Ana paid"}) == (200, {"entities": [pii]})


def test_oversized_text_is_413_before_any_call() -> None:
    stub = _stub("comprehend")  # no responses queued: a call would fail the test
    status, body = _call("comprehend.sentiment", {"text": "é" * 2501})  # 5,002 bytes
    assert status == 413
    assert "5002 bytes" in body["error"] and "5000" in body["error"]
    status, _ = _call("comprehend.entities", {"text": "a" * 100_001})
    assert status == 413
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        ("{not json", 400, "not valid JSON"),
        ("[1, 2]", 400, "JSON object"),
        ('{"text": ""}', 400, "'text' must be a non-empty string"),
        ('{"text": 5}', 400, "'text' must be a non-empty string"),
    ],
)
def test_malformed_input_is_400(raw: str, status: int, message: str) -> None:
    code, body = _call("comprehend.sentiment", None, raw=raw)
    assert code == status
    assert message in body["error"]


def test_route_not_enabled_is_404_and_get_is_405(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPERATIONS", "comprehend.sentiment")
    status, body = _call("translate.text", {"text": "x", "target_language": "fr"})
    assert status == 404 and "/comprehend/sentiment" in body["error"]
    assert _call("comprehend.sentiment", {"text": "x"}, method="GET")[0] == 405


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 429),
        ("TextSizeLimitExceededException", 413),
        ("UnsupportedLanguageException", 400),
        ("InternalServerException", 503),
        ("AccessDeniedException", 502),
    ],
)
def test_service_errors_are_mapped(code: str, status: int) -> None:
    stub = _stub("comprehend")
    stub.add_client_error("detect_entities", service_error_code=code, service_message="nope")
    got, body = _call("comprehend.entities", {"text": "hello"})
    assert got == status
    assert body["error"] == f"{code}: nope"


def test_translate_validates_languages_and_translates() -> None:
    assert _call("translate.text", {"text": "hi"})[0] == 400  # no target
    assert _call("translate.text", {"text": "hi", "target_language": "auto"})[0] == 400
    assert _call("translate.text", {"text": "x" * 10_001, "target_language": "fr"})[0] == 413
    stub = _stub("translate")
    stub.add_response(
        "translate_text",
        {"TranslatedText": "salut", "SourceLanguageCode": "en", "TargetLanguageCode": "fr"},
        {"Text": "hi", "SourceLanguageCode": "auto", "TargetLanguageCode": "fr"},
    )
    assert _call("translate.text", {"text": "hi", "target_language": "fr"}) == (
        200,
        {"text": "salut", "source_language": "en"},
    )


def test_rekognition_decodes_base64_and_limits_size() -> None:
    image = b"\x89PNG fake"
    stub = _stub("rekognition")
    stub.add_response(
        "detect_labels",
        {"Labels": [{"Name": "Cat", "Confidence": 98.0}]},
        {"Image": {"Bytes": image}, "MaxLabels": 50},
    )
    status, body = _call("rekognition.labels", {"image": base64.b64encode(image).decode()})
    assert (status, body) == (200, {"labels": [{"name": "Cat", "confidence": 98.0}]})
    assert _call("rekognition.labels", {"image": "***"})[0] == 400
    big = base64.b64encode(b"x" * (5 * 1024 * 1024 + 1)).decode()
    assert _call("rekognition.text", {"image": big})[0] == 413


def test_textract_analyze_document() -> None:
    doc = b"%PDF-1.4 one page"
    stub = _stub("textract")
    stub.add_response(
        "analyze_document",
        {"DocumentMetadata": {"Pages": 1}, "Blocks": [{"BlockType": "PAGE", "Id": "p1"}]},
        {"Document": {"Bytes": doc}, "FeatureTypes": ["TABLES"]},
    )
    status, body = _call("textract.analyze", {"document": base64.b64encode(doc).decode(), "features": ["TABLES"]})
    assert status == 200 and body["pages"] == 1
    assert _call("textract.analyze", {"document": base64.b64encode(doc).decode(), "features": ["QUERIES"]})[0] == 400


def test_transcribe_starts_a_job_on_the_media_prefix_with_encrypted_output() -> None:
    stub = _stub("transcribe")
    stub.add_response(
        "start_transcription_job",
        {"TranscriptionJob": {"TranscriptionJobName": "call-1", "TranscriptionJobStatus": "IN_PROGRESS"}},
        {
            "TranscriptionJobName": "call-1",
            "LanguageCode": "en-US",
            "Media": {"MediaFileUri": "s3://media-bucket/media/calls/1.mp3"},
            "OutputBucketName": "media-bucket",
            "OutputKey": "transcripts/call-1.json",
            "OutputEncryptionKMSKeyId": "arn:aws:kms:us-east-1:123456789012:key/k",
        },
    )
    body = {"job_name": "call-1", "media_key": "calls/1.mp3", "language_code": "en-US"}
    assert _call("transcribe.start", body) == (200, {"job_name": "call-1", "status": "IN_PROGRESS"})
    assert _call("transcribe.start", {**body, "media_key": "../secret"})[0] == 400
    stub.add_client_error("start_transcription_job", service_error_code="ConflictException", service_message="taken")
    assert _call("transcribe.start", body)[0] == 409


def test_bedrock_converse_with_guardrail_and_allowed_models_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDRAIL_ID", "gr1")
    monkeypatch.setenv("GUARDRAIL_VERSION", "2")
    stub = _stub("bedrock-runtime")
    stub.add_response(
        "converse",
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "Hello"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
            "metrics": {"latencyMs": 10},
        },
        {
            "modelId": "amazon.nova-micro-v1:0",
            "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
            "inferenceConfig": {"maxTokens": 100},
            "guardrailConfig": {"guardrailIdentifier": "gr1", "guardrailVersion": "2"},
        },
    )
    status, body = _call("bedrock.converse", {"model_id": "amazon.nova-micro-v1:0", "prompt": "Hi", "max_tokens": 100})
    assert (status, body["text"], body["stop_reason"]) == (200, "Hello", "end_turn")
    assert _call("bedrock.converse", {"model_id": "anthropic.other", "prompt": "Hi"})[0] == 400
    assert _call("bedrock.converse", {"prompt": "Hi", "max_tokens": 513})[0] == 400
    assert _call("bedrock.converse", {"prompt": "x" * 100_001})[0] == 413
    stub.add_client_error("converse", service_error_code="ModelTimeoutException", service_message="slow")
    assert _call("bedrock.converse", {"prompt": "Hi"})[0] == 504


@pytest.mark.parametrize("timeout", [25, 10, 29])
def test_bedrock_makes_one_attempt_whose_read_timeout_ends_before_the_function(
    monkeypatch: pytest.MonkeyPatch, timeout: int
) -> None:
    """A read timeout is not retried: the generation was billed once, and a second one could not finish before
    Lambda stops the function."""
    monkeypatch.setenv("TIMEOUT_SECONDS", str(timeout))
    client = h._client("bedrock-runtime")
    config = client.meta.config
    assert config.retries["total_max_attempts"] == 1
    assert config.connect_timeout + config.read_timeout < timeout
    sends: list[str] = []

    def read_times_out(request: Any, **_: Any) -> None:
        sends.append(request.url)
        raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send.bedrock-runtime.Converse", read_times_out)
    status, body = _call("bedrock.converse", {"prompt": "Hi"})
    assert (status, body["error"]) == (502, "calling the service failed: ReadTimeoutError")
    assert len(sends) == 1


def test_other_services_retry_within_the_function_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIMEOUT_SECONDS", "25")
    config = h._client("comprehend").meta.config
    attempts = config.retries["total_max_attempts"]
    assert attempts == 3
    assert attempts * (config.connect_timeout + config.read_timeout) < 25
