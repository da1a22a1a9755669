"""The document pipeline's state machine definition (typed Step Functions states), built by `DocumentPipeline`."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

RETRYABLE_ERRORS = ("ServiceBusyError",)
"""What the task handlers raise on throttling or a 5xx from Textract, Comprehend or S3 (retried with backoff)."""

_LAMBDA_ERRORS = ["Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException"]
_DYNAMODB_ERRORS = ["DynamoDB.InternalServerErrorException", "DynamoDB.RequestLimitExceededException"]


def pipeline_definition(
    scope: Construct,
    *,
    start_fn: lambda_.IFunction,
    check_fn: lambda_.IFunction,
    entities_fn: lambda_.IFunction,
    failure_fn: lambda_.IFunction,
    table: dynamodb.ITable,
    dead_letter_queue: sqs.IQueue,
    poll_interval: Duration,
) -> sfn.IChainable:
    """Document -> StartAnalysis -> (WaitForTextract -> CheckAnalysis)* -> ExtractEntities -> IndexResult, with
    retries on every task and a catch to RecordFailure -> IndexFailure -> DocumentFailed (DLQ if that fails)."""
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
    entities = _task(scope, "ExtractEntities", entities_fn)
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
    for step in (start, check, entities, index):
        step.add_catch(failure_path, errors=["States.ALL"], result_path="$.error")
    done = sfn.Succeed(scope, "Indexed")
    finished = (
        sfn.Choice(scope, "TextractDone?")
        .when(sfn.Condition.string_equals("$.status", "IN_PROGRESS"), wait)
        .otherwise(entities.next(index).next(done))
    )
    return document.next(start).next(wait).next(check).next(finished)


def _task(scope: Construct, construct_id: str, function: lambda_.IFunction) -> tasks.LambdaInvoke:
    task = tasks.LambdaInvoke(
        scope,
        construct_id,
        lambda_function=function,
        payload_response_only=True,
        retry_on_service_exceptions=False,
    )
    _retry(task, [*_LAMBDA_ERRORS, *RETRYABLE_ERRORS])
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
