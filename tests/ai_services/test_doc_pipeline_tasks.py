"""The document pipeline's task handlers, run in the state machine's order on a sample document made here.

S3 is moto's; Textract's asynchronous text detection and Comprehend are botocore Stubbers (moto does not run
StartDocumentTextDetection/GetDocumentTextDetection or DetectPiiEntities with real offsets).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from runtime.ai_services.doc_pipeline import tasks

REGION = "us-east-1"
BUCKET = "documents"
KEY = "input/claims/claim-7.pdf"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "INPUT_PREFIX": "input/",
        "WORK_PREFIX": "work/",
        "RESULTS_PREFIX": "results/",
        "FAILED_PREFIX": "failed/",
        "MAX_POLLS": "3",
        "MAX_PAGES": "10",
        "LANGUAGE": "en",
        "PII_REDACTION": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tasks, "_clients", {})
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        # A two-page "PDF": the bytes only have to exist; Textract is stubbed.
        client.put_object(Bucket=BUCKET, Key=KEY, Body=b"%PDF-1.7\n2 0 obj<</Type/Pages/Count 2>>endobj\n%%EOF")
        tasks._clients["s3"] = client
        yield client


def _stub(service: str) -> Stubber:
    client = boto3.client(service, region_name=REGION)
    tasks._clients[service] = client
    stubber = Stubber(client)
    stubber.activate()
    return stubber


def _event() -> dict[str, Any]:
    return {"bucket": BUCKET, "key": KEY, "etag": "abc", "execution": "arn:exec:1"}


def _line(text: str) -> dict[str, Any]:
    return {"BlockType": "LINE", "Text": text, "Id": text[:8]}


def _map(state: dict[str, Any]) -> dict[str, Any]:
    """What the ExtractEntities Map state does: one extract_chunk per listed piece, results in `parts`."""
    items = [
        {"bucket": state["bucket"], "key": state["key"], "text_key": state["text_key"], "chunk": index}
        for index in state["chunks"]
    ]
    return {**state, "parts": [tasks.extract_chunk(item) for item in items]}


def test_tasks_in_order_turn_a_document_into_indexed_results(s3: Any) -> None:
    textract, comprehend = _stub("textract"), _stub("comprehend")
    # Text detection, not TABLES/FORMS analysis: the pipeline keeps LINE text only.
    textract.add_response(
        "start_document_text_detection",
        {"JobId": "job-1"},
        {"DocumentLocation": {"S3Object": {"Bucket": BUCKET, "Name": KEY}}, "ClientRequestToken": ANY},
    )
    state = tasks.start_analysis(_event())
    assert (state["job_id"], state["status"], state["polls"]) == ("job-1", "IN_PROGRESS", 0)

    textract.add_response(
        "get_document_text_detection",
        {"JobStatus": "IN_PROGRESS", "Blocks": []},
        {"JobId": "job-1", "MaxResults": 1000},
    )
    state = tasks.check_analysis(state)
    assert (state["status"], state["polls"]) == ("IN_PROGRESS", 1)

    # Two result pages (NextToken): all LINE blocks, in order.
    textract.add_response(
        "get_document_text_detection",
        {
            "JobStatus": "SUCCEEDED",
            "DocumentMetadata": {"Pages": 2},
            "Blocks": [{"BlockType": "PAGE", "Id": "p1"}, _line("Claimant: Ana Silva")],
            "NextToken": "t2",
        },
        {"JobId": "job-1", "MaxResults": 1000},
    )
    textract.add_response(
        "get_document_text_detection",
        {"JobStatus": "SUCCEEDED", "DocumentMetadata": {"Pages": 2}, "Blocks": [_line("Insurer: Acme Corp")]},
        {"JobId": "job-1", "MaxResults": 1000, "NextToken": "t2"},
    )
    state = tasks.check_analysis(state)
    assert state["status"] == "SUCCEEDED" and state["pages"] == 2
    text = "Claimant: Ana Silva\nInsurer: Acme Corp"
    assert s3.get_object(Bucket=BUCKET, Key=state["text_key"])["Body"].read().decode() == text
    assert state["text_key"] == "work/claims/claim-7.pdf.txt"
    assert state["chunks"] == [0]

    comprehend.add_response(
        "detect_pii_entities",
        {"Entities": [{"Type": "NAME", "Score": 0.99, "BeginOffset": 10, "EndOffset": 19}]},
        {"Text": text, "LanguageCode": "en"},
    )
    redacted = "Claimant: [NAME]\nInsurer: Acme Corp"
    comprehend.add_response(
        "detect_entities",
        {
            "Entities": [
                {"Type": "ORGANIZATION", "Text": "Acme Corp", "Score": 0.97, "BeginOffset": 26, "EndOffset": 35}
            ]
        },
        {"Text": redacted, "LanguageCode": "en"},
    )
    state = tasks.write_result(_map(state))
    textract.assert_no_pending_responses()
    comprehend.assert_no_pending_responses()
    assert state["result_key"] == "results/claims/claim-7.pdf.json"
    assert state["entity_count"] == 1
    assert "parts" not in state and "chunks" not in state  # the state stays small for IndexResult
    result = json.loads(s3.get_object(Bucket=BUCKET, Key=state["result_key"])["Body"].read())
    assert result["text"] == redacted
    assert "Ana" not in json.dumps(result)
    assert result["pii_types"] == ["NAME"] and result["pages"] == 2
    assert result["entities"] == [{"type": "ORGANIZATION", "text": "Acme Corp", "score": 0.97, "begin": 26, "end": 35}]
    # The unredacted text and the pieces are gone from the work prefix.
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="work/")["KeyCount"] == 0


def test_a_long_document_is_split_into_pieces_whose_offsets_join_up(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PII_REDACTION", "false")
    line = "Acme Corp pays " + "x" * 60_000
    text = f"{line}\n{line}"  # two lines of 60 KB: two Comprehend requests
    textract, comprehend = _stub("textract"), _stub("comprehend")
    textract.add_response(
        "get_document_text_detection",
        {"JobStatus": "SUCCEEDED", "DocumentMetadata": {"Pages": 2}, "Blocks": [_line(line), _line(line)]},
        None,
    )
    state = tasks.check_analysis({**_event(), "job_id": "job-1", "polls": 0})
    assert state["chunks"] == [0, 1]
    for piece in (f"{line}\n", line):
        entity = {"Type": "ORGANIZATION", "Text": "Acme Corp", "Score": 0.9, "BeginOffset": 0, "EndOffset": 9}
        comprehend.add_response("detect_entities", {"Entities": [entity]}, {"Text": piece, "LanguageCode": "en"})
    state = tasks.write_result(_map(state))
    comprehend.assert_no_pending_responses()
    result = json.loads(s3.get_object(Bucket=BUCKET, Key=state["result_key"])["Body"].read())
    assert result["text"] == text
    assert [(e["begin"], e["end"]) for e in result["entities"]] == [(0, 9), (len(line) + 1, len(line) + 10)]
    assert all(result["text"][e["begin"] : e["end"]] == "Acme Corp" for e in result["entities"])


def test_a_document_over_the_page_limit_is_rejected(s3: Any) -> None:
    textract = _stub("textract")
    textract.add_response(
        "get_document_text_detection", {"JobStatus": "SUCCEEDED", "DocumentMetadata": {"Pages": 11}, "Blocks": []}, None
    )
    with pytest.raises(tasks.DocumentRejectedError, match="11 pages; this pipeline takes at most 10"):
        tasks.check_analysis({**_event(), "job_id": "job-1", "polls": 0})


def test_failure_path_keeps_the_document_and_the_reason(s3: Any) -> None:
    cause = json.dumps(
        {"errorMessage": "Textract job job-1 ended FAILED: bad scan", "errorType": "DocumentRejectedError"}
    )
    state = tasks.record_failure({**_event(), "error": {"Error": "DocumentRejectedError", "Cause": cause}})
    assert state["failed_key"] == "failed/claims/claim-7.pdf"
    copy = s3.get_object(Bucket=BUCKET, Key="failed/claims/claim-7.pdf")["Body"].read()
    assert copy == s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read()
    reason = json.loads(s3.get_object(Bucket=BUCKET, Key=state["reason_key"])["Body"].read())
    assert reason == {
        "document": f"s3://{BUCKET}/{KEY}",
        "error": "DocumentRejectedError",
        "cause": "Textract job job-1 ended FAILED: bad scan",
        "execution": "arn:exec:1",
    }


def test_failure_path_records_the_reason_when_the_document_was_deleted(s3: Any) -> None:
    s3.delete_object(Bucket=BUCKET, Key=KEY)
    state = tasks.record_failure({**_event(), "error": {"Error": "States.Timeout", "Cause": "timed out"}})
    reason = json.loads(s3.get_object(Bucket=BUCKET, Key=state["reason_key"])["Body"].read())
    assert reason["cause"] == "timed out" and "no longer exists" in reason["note"]


def test_unsupported_format_is_rejected_without_calling_textract(s3: Any) -> None:
    _stub("textract")  # nothing queued
    with pytest.raises(tasks.DocumentRejectedError, match="docx"):
        tasks.start_analysis({**_event(), "key": "input/memo.docx"})


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "ThrottlingException", "LimitExceededException"]
)
def test_textract_throttling_and_quota_errors_get_the_long_backoff(s3: Any, code: str) -> None:
    textract = _stub("textract")
    textract.add_client_error("start_document_text_detection", service_error_code=code)
    with pytest.raises(tasks.ThrottledError, match=code):
        tasks.start_analysis(_event())


def test_a_service_error_is_retryable_and_textract_failure_is_not(s3: Any) -> None:
    textract = _stub("textract")
    textract.add_client_error("get_document_text_detection", service_error_code="InternalServerError")
    with pytest.raises(tasks.ServiceBusyError):
        tasks.check_analysis({**_event(), "job_id": "job-1", "polls": 0})
    textract.add_response(
        "get_document_text_detection", {"JobStatus": "FAILED", "StatusMessage": "bad scan", "Blocks": []}, None
    )
    with pytest.raises(tasks.DocumentRejectedError, match="FAILED: bad scan"):
        tasks.check_analysis({**_event(), "job_id": "job-1", "polls": 0})


def test_a_job_still_running_after_max_polls_times_out(s3: Any) -> None:
    textract = _stub("textract")
    textract.add_response("get_document_text_detection", {"JobStatus": "IN_PROGRESS", "Blocks": []}, None)
    with pytest.raises(tasks.AnalysisTimedOutError, match="3 checks"):
        tasks.check_analysis({**_event(), "job_id": "job-1", "polls": 2})


def test_chunks_respect_comprehend_byte_limit_and_offsets() -> None:
    text = ("a" * 60 + "\n") * 3 + "é" * 70  # the last line is 140 bytes
    pieces = tasks.chunks(text, limit=100)
    assert all(len(p.encode()) <= 100 for _, p in pieces)
    assert "".join(p for _, p in pieces) == text
    for offset, piece in pieces:
        assert text[offset : offset + len(piece)] == piece


def test_redact_replaces_spans_from_the_end() -> None:
    pii = [{"Type": "NAME", "BeginOffset": 0, "EndOffset": 3}, {"Type": "EMAIL", "BeginOffset": 8, "EndOffset": 15}]
    assert tasks.redact("Ana at: a@b.com!", pii) == "[NAME] at: [EMAIL]!"
