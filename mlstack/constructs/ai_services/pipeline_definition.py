"""The document pipeline's state machine definition (typed Step Functions states), built by `DocumentPipeline`."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

THROTTLED_ERRORS = ("ThrottledError",)
"""What the task handlers raise when Textract, Comprehend or S3 throttles or a quota is full (Textract's
transactions per second, its concurrent asynchronous jobs): retried for up to about 20 minutes, so a burst of
uploads queues behind the quotas instead of failing after a minute."""
RETRYABLE_ERRORS = ("ServiceBusyError",)
"""What the task handlers raise on a 5xx from Textract, Comprehend or S3 (retried with a short backoff)."""
TIMEOUT_ERRORS = ("States.Timeout", "Lambda.Unknown", "Sandbox.Timedout")
"""A task that ran out of time: `States.Timeout` past the task's TimeoutSeconds; a function timeout surfaces as
`Lambda.Unknown` ("Handle Lambda service exceptions", Step Functions Developer Guide) or `Sandbox.Timedout`
(Lambda's error type for a timed-out invocation). Retried once: a slow moment passes, a document too large for
the step does not (it then goes to the failure path)."""
CHUNK_CONCURRENCY = 4
"""Pieces of one document sent to Comprehend at once (the Map state's MaxConcurrency): a 3,000-page document
has about 75 pieces, and Comprehend's synchronous detection APIs have per-second quotas of a few tens."""
TASK_TIMEOUT_MARGIN = Duration.seconds(60)
"""Step Functions waits this much longer than the function's own timeout before `States.Timeout`."""

_LAMBDA_ERRORS = ["Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException"]
_DYNAMODB_ERRORS = ["DynamoDB.InternalServerErrorException", "DynamoDB.RequestLimitExceededException"]


def pipeline_definition(
    scope: Construct,
    *,
    start_fn: lambda_.Function,
    check_fn: lambda_.Function,
    entities_fn: lambda_.Function,
    result_fn: lambda_.Function,
    failure_fn: lambda_.Function,
    table: dynamodb.ITable,
    dead_letter_queue: sqs.IQueue,
    poll_interval: Duration,
) -> sfn.IChainable:
    """Document -> StartAnalysis -> (WaitForTextract -> CheckAnalysis)* -> ExtractEntities (a Map state, one
    ExtractChunk per Comprehend-sized piece) -> WriteResult -> IndexResult, with retries on every task and a catch
    to RecordFailure -> IndexFailure -> DocumentFailed (DLQ if that fails)."""
    document = sfn.Pass(
        scope,
        "Document",
        comment="Bucket, key and ETag of the uploaded object, from the S3 event",
        parameters={
            "bucket.$": "$.detail.bucket.name",
            "key.$": "$.detail.object.key",
            "etag.$": "$.detail.object.etag",
            "execution.$": "$$.Execution.Id",
        },
    )
    record_failure = _task(scope, "RecordFailure", failure_fn)
    send_to_dlq = tasks.SqsSendMessage(
        scope,
        "SendToDeadLetterQueue",
        queue=dead_letter_queue,
        message_body=sfn.TaskInput.from_json_path_at("$"),
        result_path=sfn.JsonPath.DISCARD,
    )
    failed = sfn.Fail(scope, "DocumentFailed", cause="see failed/<key>.error.json", error="DocumentFailed")
    index_failure = tasks.DynamoPutItem(
        scope,
        "IndexFailure",
        table=table,
        item={
            "document": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.key")),
            "status": tasks.DynamoAttributeValue.from_string("FAILED"),
            "reason_key": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.reason_key")),
            "execution": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.execution")),
        },
        result_path=sfn.JsonPath.DISCARD,
    )
    _retry(index_failure, _DYNAMODB_ERRORS)
    record_failure.add_catch(send_to_dlq, errors=["States.ALL"], result_path="$.failure_error")
    index_failure.add_catch(send_to_dlq, errors=["States.ALL"], result_path="$.failure_error")
    send_to_dlq.next(failed)
    failure_path = record_failure.next(index_failure).next(failed)

    start = _task(scope, "StartAnalysis", start_fn)
    wait = sfn.Wait(scope, "WaitForTextract", time=sfn.WaitTime.duration(poll_interval))
    check = _task(scope, "CheckAnalysis", check_fn)
    chunk = _task(scope, "ExtractChunk", entities_fn)
    entities = sfn.Map(
        scope,
        "ExtractEntities",
        comment="Comprehend over each piece of the text, a few at a time",
        items_path="$.chunks",
        item_selector={
            "bucket.$": "$.bucket",
            "key.$": "$.key",
            "text_key.$": "$.text_key",
            "chunk.$": "$$.Map.Item.Value",
        },
        max_concurrency=CHUNK_CONCURRENCY,
        result_path="$.parts",
    )
    entities.item_processor(chunk)
    write = _task(scope, "WriteResult", result_fn)
    index = tasks.DynamoPutItem(
        scope,
        "IndexResult",
        table=table,
        item={
            "document": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.key")),
            "status": tasks.DynamoAttributeValue.from_string("SUCCEEDED"),
            "result_key": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.result_key")),
            "pages": tasks.DynamoAttributeValue.number_from_string(
                sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.pages"))
            ),
            "entities": tasks.DynamoAttributeValue.number_from_string(
                sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.entity_count"))
            ),
            "execution": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.execution")),
        },
        result_path=sfn.JsonPath.DISCARD,
    )
    _retry(index, _DYNAMODB_ERRORS)
    for step in (start, check, entities, write, index):
        step.add_catch(failure_path, errors=["States.ALL"], result_path="$.error")
    done = sfn.Succeed(scope, "Indexed")
    finished = (
        sfn.Choice(scope, "TextractDone?")
        .when(sfn.Condition.string_equals("$.status", "IN_PROGRESS"), wait)
        .otherwise(entities.next(write).next(index).next(done))
    )
    return document.next(start).next(wait).next(check).next(finished)


def _task(scope: Construct, construct_id: str, function: lambda_.Function) -> tasks.LambdaInvoke:
    task = tasks.LambdaInvoke(
        scope,
        construct_id,
        lambda_function=function,
        payload_response_only=True,
        retry_on_service_exceptions=False,
        task_timeout=sfn.Timeout.duration(function.timeout.plus(TASK_TIMEOUT_MARGIN))
        if function.timeout is not None
        else None,
    )
    _retry(task, [*_LAMBDA_ERRORS, *RETRYABLE_ERRORS])
    # Throttling: 10, 20, 40, 80, 160, then 300 s three times (full jitter), about 20 minutes at most.
    task.add_retry(
        errors=list(THROTTLED_ERRORS),
        interval=Duration.seconds(10),
        max_attempts=8,
        backoff_rate=2,
        max_delay=Duration.seconds(300),
        jitter_strategy=sfn.JitterType.FULL,
    )
    task.add_retry(errors=list(TIMEOUT_ERRORS), interval=Duration.seconds(30), max_attempts=1)
    return task


def _retry(task: sfn.TaskStateBase, errors: list[str]) -> None:
    """Exponential backoff with jitter: 2, 4, 8, 16, 32 s (5 attempts), then the catch."""
    task.add_retry(
        errors=errors,
        interval=Duration.seconds(2),
        max_attempts=5,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )
