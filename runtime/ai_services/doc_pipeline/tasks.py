"""The document pipeline's Step Functions task handlers, in the order the state machine runs them.

Each takes the state (a dict) and returns it with its own fields added, so the state machine needs no
ResultSelector plumbing: `start_analysis` -> `check_analysis` (repeated while IN_PROGRESS) -> `extract_chunk`
(once per Comprehend-sized piece of the text, in a Map state) -> `write_result`; on any error the state machine
calls `record_failure`.

Textract runs text detection (StartDocumentTextDetection): the pipeline keeps LINE text only, and analysis with
TABLES or FORMS bills many times the text-detection page price for the same lines (Amazon Textract pricing).

Errors: `ThrottledError` (a throttling or quota error) is retried by the state machine with a long backoff, up
to about 20 minutes, so a burst of uploads waits for Textract's transaction and concurrent-job quotas instead
of failing; `ServiceBusyError` (a 5xx) with a short one; every other exception goes to the failure path.
Payloads stay small (Step Functions passes at most 256 KB between states): text and results travel through S3.

Environment: BUCKET, INPUT_PREFIX, WORK_PREFIX, RESULTS_PREFIX, FAILED_PREFIX, MAX_POLLS, MAX_PAGES, LANGUAGE,
PII_REDACTION.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any

import boto3
from botocore.exceptions import ClientError

COMPREHEND_MAX_BYTES = 100_000
"""DetectEntities / DetectPiiEntities accept at most 100 KB of UTF-8 per call (Amazon Comprehend quotas)."""

SUPPORTED_SUFFIXES = (".pdf", ".tif", ".tiff", ".png", ".jpg", ".jpeg")
"""Formats asynchronous Textract analysis accepts (Amazon Textract, Input documents)."""

_THROTTLED = {
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "TooManyRequestsException",
    "SlowDown",
}
"""Textract's throttling and quota errors (ProvisionedThroughputExceededException: the transactions-per-second
quota; LimitExceededException: the concurrent-jobs quota; Amazon Textract API reference, Common errors), and
Comprehend's and S3's."""
_BUSY = {
    "InternalServerError",
    "InternalServerException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
}

_clients: dict[str, Any] = {}


class ThrottledError(Exception):
    """Throttled or over a quota: the state machine retries this with a long backoff (minutes)."""


class ServiceBusyError(Exception):
    """A service-side error: the state machine retries this with a short backoff."""


class DocumentRejectedError(Exception):
    """The document cannot be processed (format, size, Textract said no): goes to the failure path."""


class AnalysisTimedOutError(Exception):
    """Textract did not finish within MAX_POLLS status checks."""


def _client(service: str) -> Any:
    if service not in _clients:
        _clients[service] = boto3.client(service)
    return _clients[service]


def _call(service: str, operation: str, **kwargs: Any) -> Any:
    """Call an API; a retryable error becomes `ThrottledError` or `ServiceBusyError`, others propagate (to the
    failure path)."""
    try:
        return getattr(_client(service), operation)(**kwargs)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in _THROTTLED:
            raise ThrottledError(f"{service}.{operation}: {code}") from err
        if code in _BUSY:
            raise ServiceBusyError(f"{service}.{operation}: {code}") from err
        raise


def _name(key: str) -> str:
    return key.removeprefix(os.environ["INPUT_PREFIX"])


def _work_key(key: str, suffix: str = ".txt") -> str:
    return os.environ["WORK_PREFIX"] + _name(key) + suffix


def _result_key(key: str) -> str:
    return os.environ["RESULTS_PREFIX"] + _name(key) + ".json"


def start_analysis(state: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Start asynchronous Textract text detection (multi-page documents); idempotent per object version."""
    bucket, key = state["bucket"], state["key"]
    if not key.startswith(os.environ["INPUT_PREFIX"]):
        raise DocumentRejectedError(f"{key} is not under {os.environ['INPUT_PREFIX']}")
    if not key.lower().endswith(SUPPORTED_SUFFIXES):
        raise DocumentRejectedError(f"{key}: Textract reads {', '.join(SUPPORTED_SUFFIXES)} documents only")
    # A retried start with the same token returns the same job instead of paying for a second detection.
    token = hashlib.sha256(f"{bucket}/{key}/{state.get('etag', '')}".encode()).hexdigest()[:64]
    try:
        out = _call(
            "textract",
            "start_document_text_detection",
            DocumentLocation={"S3Object": {"Bucket": bucket, "Name": key}},
            ClientRequestToken=token,
        )
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in {"InvalidS3ObjectException", "UnsupportedDocumentException", "DocumentTooLargeException"}:
            raise DocumentRejectedError(f"{code}: {err.response['Error'].get('Message', '')}") from err
        raise
    return {**state, "job_id": out["JobId"], "status": "IN_PROGRESS", "polls": 0}


def check_analysis(state: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Poll the job; when it succeeded, write the text (LINE blocks, in order) to the work prefix and list the
    pieces `extract_chunk` will take (one per Comprehend request)."""
    polls = int(state.get("polls", 0)) + 1
    out = _call("textract", "get_document_text_detection", JobId=state["job_id"], MaxResults=1000)
    status = out["JobStatus"]
    if status == "IN_PROGRESS":
        if polls >= int(os.environ.get("MAX_POLLS", "60")):
            raise AnalysisTimedOutError(f"Textract job {state['job_id']} still running after {polls} checks")
        return {**state, "status": "IN_PROGRESS", "polls": polls}
    if status != "SUCCEEDED":  # FAILED, PARTIAL_SUCCESS
        raise DocumentRejectedError(f"Textract job {state['job_id']} ended {status}: {out.get('StatusMessage', '')}")
    pages, max_pages = out["DocumentMetadata"]["Pages"], int(os.environ.get("MAX_PAGES", "3000"))
    if pages > max_pages:
        raise DocumentRejectedError(f"{pages} pages; this pipeline takes at most {max_pages} (MAX_PAGES)")
    lines = _lines(out["Blocks"])
    while out.get("NextToken"):
        out = _call(
            "textract",
            "get_document_text_detection",
            JobId=state["job_id"],
            MaxResults=1000,
            NextToken=out["NextToken"],
        )
        lines += _lines(out["Blocks"])
    text = "\n".join(lines)
    text_key = _work_key(state["key"])
    _call("s3", "put_object", Bucket=state["bucket"], Key=text_key, Body=text.encode("utf-8"))
    pieces = list(range(len(chunks(text)))) if text.strip() else []
    return {**state, "status": "SUCCEEDED", "polls": polls, "pages": pages, "text_key": text_key, "chunks": pieces}


def _lines(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["Text"] for b in blocks if b.get("BlockType") == "LINE" and "Text" in b]


def chunks(text: str, limit: int = COMPREHEND_MAX_BYTES) -> list[tuple[int, str]]:
    """Split `text` into (character offset, piece) with each piece at most `limit` UTF-8 bytes, on line breaks
    where possible (a longer line is cut)."""
    pieces: list[tuple[int, str]] = []
    start, current, size = 0, "", 0
    for line in text.splitlines(keepends=True):
        encoded = len(line.encode("utf-8"))
        if size + encoded > limit and current:
            pieces.append((start, current))
            start, current, size = start + len(current), "", 0
        while encoded > limit:  # one line longer than the limit
            cut = limit
            while len(line[:cut].encode("utf-8")) > limit:
                cut -= 1
            pieces.append((start, line[:cut]))
            start, line = start + cut, line[cut:]
            encoded = len(line.encode("utf-8"))
        current, size = current + line, size + encoded
    if current:
        pieces.append((start, current))
    return pieces


def _detect(operation: str, text: str, language: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for offset, piece in chunks(text):
        out = _call("comprehend", operation, Text=piece, LanguageCode=language)
        for entity in out["Entities"]:
            found.append(
                {**entity, "BeginOffset": entity["BeginOffset"] + offset, "EndOffset": entity["EndOffset"] + offset}
            )
    return found


def redact(text: str, pii: list[dict[str, Any]]) -> str:
    """Replace each PII span with `[TYPE]` (spans applied from the end so offsets stay valid)."""
    for entity in sorted(pii, key=lambda e: e["BeginOffset"], reverse=True):
        text = text[: entity["BeginOffset"]] + f"[{entity['Type']}]" + text[entity["EndOffset"] :]
    return text


def extract_chunk(state: dict[str, Any], context: object = None) -> dict[str, Any]:
    """One piece of the text (`chunk`, an index into `chunks(text)`): PII redaction when asked, then Comprehend
    entities; writes the piece's result next to the text and returns only its key (the Map state collects them).
    A piece is at most one Comprehend request, so one invocation takes seconds whatever the document's size."""
    bucket, language, index = state["bucket"], os.environ.get("LANGUAGE", "en"), int(state["chunk"])
    text = _call("s3", "get_object", Bucket=bucket, Key=state["text_key"])["Body"].read().decode("utf-8")
    _, piece = chunks(text)[index]
    part: dict[str, Any] = {}
    if os.environ.get("PII_REDACTION") == "true":
        pii = _detect("detect_pii_entities", piece, language)
        piece = redact(piece, pii)  # may grow past one request: `_detect` splits it again
        part["pii_types"] = sorted({e["Type"] for e in pii})
        part["pii_count"] = len(pii)
    part["entities"] = _detect("detect_entities", piece, language) if piece.strip() else []
    part["text"] = piece
    part_key = _work_key(state["key"], f".part-{index:05d}.json")
    _call("s3", "put_object", Bucket=bucket, Key=part_key, Body=json.dumps(part).encode("utf-8"))
    return {"part_key": part_key}


def write_result(state: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Join the pieces in order into results/<key>.json (offsets into the whole, redacted text); delete the work
    objects (the unredacted text among them)."""
    bucket = state["bucket"]
    texts: list[str] = []
    entities: list[dict[str, Any]] = []
    pii_types: set[str] = set()
    pii_count, offset = 0, 0
    for item in state.get("parts", []):
        body = _call("s3", "get_object", Bucket=bucket, Key=item["part_key"])["Body"].read()
        part = json.loads(body)
        for e in part["entities"]:
            entities.append(
                {
                    "type": e["Type"],
                    "text": e["Text"],
                    "score": e["Score"],
                    "begin": e["BeginOffset"] + offset,
                    "end": e["EndOffset"] + offset,
                }
            )
        pii_types |= set(part.get("pii_types", []))
        pii_count += part.get("pii_count", 0)
        texts.append(part["text"])
        offset += len(part["text"])
    language = os.environ.get("LANGUAGE", "en")
    result: dict[str, Any] = {
        "document": f"s3://{bucket}/{state['key']}",
        "pages": state["pages"],
        "language": language,
    }
    if os.environ.get("PII_REDACTION") == "true":
        result["pii_types"] = sorted(pii_types)
        result["pii_count"] = pii_count
    result["entities"] = entities
    result["text"] = "".join(texts)
    result_key = _result_key(state["key"])
    _call("s3", "put_object", Bucket=bucket, Key=result_key, Body=json.dumps(result).encode("utf-8"))
    for work in [state["text_key"], *(item["part_key"] for item in state.get("parts", []))]:
        _call("s3", "delete_object", Bucket=bucket, Key=work)
    return {
        **{k: v for k, v in state.items() if k not in ("parts", "chunks")},
        "result_key": result_key,
        "entity_count": len(entities),
    }


def record_failure(state: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Copy the document under the failure prefix with `<key>.error.json` next to it (the reason)."""
    bucket, key = state["bucket"], state["key"]
    failed_key = os.environ["FAILED_PREFIX"] + _name(key)
    error = state.get("error", {})
    cause = error.get("Cause", "")
    with contextlib.suppress(ValueError, AttributeError):  # a Lambda error's cause is JSON: keep its message
        cause = json.loads(cause).get("errorMessage", cause)
    reason = {
        "document": f"s3://{bucket}/{key}",
        "error": error.get("Error", "unknown"),
        "cause": cause,
        "execution": state.get("execution", ""),
    }
    copied = True
    try:
        _call("s3", "copy_object", Bucket=bucket, Key=failed_key, CopySource={"Bucket": bucket, "Key": key})
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in {"NoSuchKey", "404"}:
            raise
        copied = False  # deleted since upload: the reason still lands
        reason["note"] = "the document no longer exists under the input prefix"
    reason_key = failed_key + ".error.json"
    _call("s3", "put_object", Bucket=bucket, Key=reason_key, Body=json.dumps(reason).encode("utf-8"))
    return {**state, "failed_key": failed_key if copied else "", "reason_key": reason_key}
