"""`DocumentPipeline`: upload -> Step Functions -> Textract (async) -> Comprehend -> JSON in S3 + DynamoDB index."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from mlstack import resources
from mlstack.constructs.ai_services.pipeline_definition import pipeline_definition
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import (
    acknowledge_nag,
    nag_id,
    skip_checkov,
    skip_guard,
    skip_guard_on_functions_outside_vpc,
)
from mlstack.constructs.security.function_role import function_role_and_logs, python_function
from mlstack.constructs.storage.buckets import NONCURRENT, kms_bucket

HANDLER_DIR = resources.runtime_path("ai_services", "doc_pipeline")
"""`runtime/ai_services/doc_pipeline/`: the task handlers, run in order on a sample document in tests/ai_services."""

INPUT_PREFIX = "input/"
RESULTS_PREFIX = "results/"
FAILED_PREFIX = "failed/"
WORK_PREFIX = "work/"
"""Extracted text and per-piece results between steps; deleted by WriteResult, expired after a day if a run dies."""
MAX_PAGES = 3000
"""Asynchronous Textract takes PDF and TIFF documents of up to 3,000 pages (Amazon Textract quotas, "Hard limits")."""

LAMBDA_CHECKOV_SKIPS = {
    "CKV_AWS_115": "no reserved concurrency: reserving takes from the account's unreserved pool, which new "
    "accounts cannot spare (CreateFunction fails); Step Functions bounds concurrency by executions",
    "CKV_AWS_116": "invoked synchronously by Step Functions, which retries and catches; a DLQ applies to async invokes",
    "CKV_AWS_117": "calls only AWS APIs (Textract, Comprehend, S3); nothing in a VPC",
    "CKV_AWS_173": "environment holds names and prefixes only, no secrets",
}


class DocumentPipeline(Construct):
    """Documents uploaded under `input/` of `bucket` are analysed and indexed; a failure is never lost.

    - An EventBridge rule (S3 Object Created, `input/` prefix) starts the state machine; events it cannot
      deliver go to `dead_letter_queue`.
    - The state machine (Standard) starts asynchronous Textract text detection (multi-page PDFs and TIFFs, up to
      `max_pages` pages), polls it, runs Comprehend entity detection (and PII redaction if asked) over the text
      in pieces of one Comprehend request each (a Map state, a few at a time, so no step's time grows with the
      document), writes `results/<key>.json` and puts an item in `table`. Throttling is retried for up to about
      20 minutes, service errors with a short backoff, a timed-out step once.
    - Any error goes to the failure path: the document is copied under `failed/` with `<key>.error.json`
      holding the reason, and the index marks it FAILED. If that path fails too, the execution input goes to
      `dead_letter_queue`.
    - Logs (state machine and functions) are encrypted with `key` and kept per `log_retention`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        removal_policy: RemovalPolicy = RETAINED,
        access_logs_bucket: s3.IBucket | None = None,
        language: str = "en",
        pii_redaction: bool = False,
        max_pages: int = 3000,
        poll_interval: Duration = Duration.seconds(10),  # noqa: B008 - immutable
        max_polls: int = 60,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        """`key` encrypts the bucket, table, logs; `access_logs_bucket` receives S3 server access logs (None: off).

        Defaults: English, no PII redaction, documents of up to 3,000 pages (Textract's asynchronous limit for
        PDF and TIFF), a status check every 10 s up to 60 times (10 minutes), logs kept one year, everything
        stateful retained. Alarms (a failed document, a message
        in the dead-letter queue) notify `alarm_topic` when given (None: alarms without an action).
        """
        super().__init__(scope, construct_id)
        if not 1 <= max_pages <= MAX_PAGES:
            raise ValueError(f"max_pages: {max_pages} is outside 1..{MAX_PAGES} (Textract's asynchronous page limit)")
        self.key = key
        self.bucket = kms_bucket(
            self,
            "Bucket",
            key=key,
            access_logs=access_logs_bucket,
            log_prefix="documents/",
            removal_policy=removal_policy,
            lifecycle_rules=[
                s3.LifecycleRule(id="ExpireWork", prefix=WORK_PREFIX, expiration=Duration.days(1)),
                NONCURRENT,
            ],
            guard_skips=None,  # its own, below
        )
        # EventBridge notifications on the bucket itself: `event_bridge_enabled=True` would add a custom resource
        # (a Lambda function with a managed policy) to call PutBucketNotificationConfiguration instead.
        cfn_bucket = self.bucket.node.default_child
        assert isinstance(cfn_bucket, s3.CfnBucket)
        cfn_bucket.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
            event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(event_bridge_enabled=True)
        )
        if access_logs_bucket is None:
            acknowledge_nag(self.bucket, {"AwsSolutions-S1": "the caller chose no access-log bucket"})
        skip_guard(
            self.bucket,
            {
                "CT.S3.PR.9": "Object Lock would stop the pipeline deleting its own work files and a user deleting a "
                "document; the bucket is versioned, TLS-only and KMS-encrypted",
            },
        )
        self.table = dynamodb.Table(
            self,
            "Index",
            partition_key=dynamodb.Attribute(name="document", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=removal_policy,
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            # SSE-SQS: EventBridge can deliver to it without a key-policy grant on the project key.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal_policy,
        )
        acknowledge_nag(self.dead_letter_queue, {"AwsSolutions-SQS3": "this queue is the dead-letter queue"})
        skip_guard(
            self.dead_letter_queue, {"CT.SQS.PR.1": "this queue is the dead-letter queue: the end of the redrive"}
        )
        skip_checkov(
            self.dead_letter_queue,
            {"CKV_AWS_27": "SSE-SQS (SqsManagedSseEnabled): EventBridge cannot use the project key without a grant"},
        )

        common = {
            "BUCKET": self.bucket.bucket_name,
            "RESULTS_PREFIX": RESULTS_PREFIX,
            "WORK_PREFIX": WORK_PREFIX,
            "FAILED_PREFIX": FAILED_PREFIX,
            "INPUT_PREFIX": INPUT_PREFIX,
        }
        self.start_fn = self._function(
            "StartAnalysis",
            "tasks.start_analysis",
            common,
            log_retention,
            removal_policy,
        )
        # Collecting the text pages through GetDocumentTextDetection (1,000 blocks a call, a few pages) is the one
        # step whose time grows with the document: Lambda's maximum, 15 minutes, for `max_pages`.
        self.check_fn = self._function(
            "CheckAnalysis",
            "tasks.check_analysis",
            {**common, "MAX_POLLS": str(max_polls), "MAX_PAGES": str(max_pages)},
            log_retention,
            removal_policy,
            timeout=Duration.minutes(15),
        )
        self.entities_fn = self._function(
            "ExtractEntities",
            "tasks.extract_chunk",
            {**common, "LANGUAGE": language, "PII_REDACTION": "true" if pii_redaction else "false"},
            log_retention,
            removal_policy,
        )
        self.result_fn = self._function(
            "WriteResult",
            "tasks.write_result",
            {**common, "LANGUAGE": language, "PII_REDACTION": "true" if pii_redaction else "false"},
            log_retention,
            removal_policy,
        )
        self.failure_fn = self._function("RecordFailure", "tasks.record_failure", common, log_retention, removal_policy)
        self._grant(pii_redaction)

        self.state_machine_log_group = logs.LogGroup(
            self, "StateMachineLogs", encryption_key=key, retention=log_retention, removal_policy=removal_policy
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(
                pipeline_definition(
                    self,
                    start_fn=self.start_fn,
                    check_fn=self.check_fn,
                    entities_fn=self.entities_fn,
                    result_fn=self.result_fn,
                    failure_fn=self.failure_fn,
                    table=self.table,
                    dead_letter_queue=self.dead_letter_queue,
                    poll_interval=poll_interval,
                )
            ),
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            # ALL events, without execution data: documents may hold personal data.
            logs=sfn.LogOptions(
                destination=self.state_machine_log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
        )
        key.grant_encrypt_decrypt(self.state_machine)  # the table is encrypted with `key`
        self.rule = events.Rule(
            self,
            "OnUpload",
            description=f"Start the document pipeline for objects created under {INPUT_PREFIX}",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=["Object Created"],
                detail={"bucket": {"name": [self.bucket.bucket_name]}, "object": {"key": [{"prefix": INPUT_PREFIX}]}},
            ),
            targets=[
                targets.SfnStateMachine(
                    self.state_machine,
                    dead_letter_queue=self.dead_letter_queue,
                    retry_attempts=8,
                    max_event_age=Duration.hours(24),
                )
            ],
        )
        self._acknowledge_generated()
        self.alarms = [
            cloudwatch.Alarm(
                self,
                "DocumentsFailedAlarm",
                metric=self.state_machine.metric_failed(period=Duration.minutes(5), statistic="Sum"),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"A document failed: see {FAILED_PREFIX}<name>.error.json in the documents bucket",
            ),
            cloudwatch.Alarm(
                self,
                "DeadLetterAlarm",
                metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(5), statistic="Maximum"
                ),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description="An upload event or a failure record is in the dead-letter queue: replay it",
            ),
        ]
        if alarm_topic is not None:
            for alarm in self.alarms:
                alarm.add_alarm_action(cw_actions.SnsAction(alarm_topic))

    def _function(
        self,
        construct_id: str,
        handler: str,
        environment: dict[str, str],
        retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        *,
        timeout: Duration = Duration.minutes(5),  # noqa: B008 - immutable
    ) -> lambda_.Function:
        log_group, role = function_role_and_logs(
            self,
            log_group_id=f"{construct_id}Logs",
            role_id=f"{construct_id}Role",
            description=f"Document pipeline {construct_id}: its own log group and the calls below",
            key=self.key,
            retention=retention,
            removal_policy=removal_policy,
        )
        function = python_function(
            self,
            f"{construct_id}Function",
            handler=handler,
            code_dir=HANDLER_DIR,
            role=role,
            timeout=timeout,
            memory_size=1024,
            log_group=log_group,
            environment=environment,
            description=f"Document pipeline: {handler}",
        )
        skip_checkov(function, LAMBDA_CHECKOV_SKIPS)
        skip_guard_on_functions_outside_vpc(
            function,
            "a pipeline task: calls only regional AWS APIs (Textract, Comprehend, S3, DynamoDB) and reads "
            "no VPC resource",
        )
        return function

    def _grant(self, pii_redaction: bool) -> None:
        bucket, stack = self.bucket, Stack.of(self)
        # Textract reads the document with the caller's credentials (s3:GetObject and kms:Decrypt).
        for fn in self.functions:
            self.key.grant_encrypt_decrypt(fn)
        work = bucket.arn_for_objects(f"{WORK_PREFIX}*")
        _allow(self.start_fn, ["s3:GetObject"], [bucket.arn_for_objects(f"{INPUT_PREFIX}*")])
        _allow(self.check_fn, ["s3:PutObject"], [work])
        _allow(self.entities_fn, ["s3:GetObject", "s3:PutObject"], [work])
        _allow(self.result_fn, ["s3:GetObject", "s3:DeleteObject"], [work])
        _allow(self.result_fn, ["s3:PutObject"], [bucket.arn_for_objects(f"{RESULTS_PREFIX}*")])
        _allow(self.failure_fn, ["s3:GetObject"], [bucket.arn_for_objects(f"{INPUT_PREFIX}*")])
        _allow(self.failure_fn, ["s3:PutObject"], [bucket.arn_for_objects(f"{FAILED_PREFIX}*")])
        # Textract, Comprehend detect APIs: no resource-level permissions ("Actions, resources, and condition keys
        # for Amazon Textract" / "... for Amazon Comprehend" list no resource type for these actions), so "*".
        _allow(self.start_fn, ["textract:StartDocumentTextDetection"], ["*"])
        _allow(self.check_fn, ["textract:GetDocumentTextDetection"], ["*"])
        comprehend = ["comprehend:DetectEntities"] + (["comprehend:DetectPiiEntities"] if pii_redaction else [])
        _allow(self.entities_fn, comprehend, ["*"])
        reasons = {
            self.start_fn: "textract:StartDocumentTextDetection supports no resource-level permissions",
            self.check_fn: "textract:GetDocumentTextDetection supports no resource-level permissions",
            self.entities_fn: "comprehend:Detect* (built-in models) supports no resource-level permissions",
        }
        prefixes = {
            self.start_fn: [INPUT_PREFIX],
            self.check_fn: [WORK_PREFIX],
            self.entities_fn: [WORK_PREFIX],
            self.result_fn: [WORK_PREFIX, RESULTS_PREFIX],
            self.failure_fn: [INPUT_PREFIX, FAILED_PREFIX],
        }
        for fn, fn_prefixes in prefixes.items():
            role = fn.role
            assert role is not None
            findings = {
                f"AwsSolutions-IAM5[Resource::{nag_id(stack, bucket.arn_for_objects(p + '*'))}]": (
                    f"objects under the {p} prefix only"
                )
                for p in fn_prefixes
            }
            findings["AwsSolutions-IAM5[Action::kms:GenerateDataKey*]"] = "KMS grant on the project key only"
            findings["AwsSolutions-IAM5[Action::kms:ReEncrypt*]"] = "KMS grant on the project key only"
            if fn in reasons:
                findings["AwsSolutions-IAM5[Resource::*]"] = reasons[fn] + " (AWS service authorization reference)"
            acknowledge_nag(role, findings)

    def _acknowledge_generated(self) -> None:
        role = self.state_machine.role
        stack = Stack.of(self)
        functions = self.functions
        findings = {
            "AwsSolutions-IAM5[Resource::*]": "X-Ray PutTraceSegments/PutTelemetryRecords and the CloudWatch Logs "
            "log-delivery APIs Step Functions calls support no resource-level permissions",
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]": "KMS grant on the project key only",
            "AwsSolutions-IAM5[Action::kms:ReEncrypt*]": "KMS grant on the project key only",
        }
        for fn in functions:
            findings[f"AwsSolutions-IAM5[Resource::{nag_id(stack, fn.function_arn)}:*]"] = (
                "invoke any version of this pipeline's own function"
            )
        acknowledge_nag(role, findings)

    @property
    def functions(self) -> list[lambda_.Function]:
        """The task functions, in the order the state machine runs them (the failure handler last)."""
        return [self.start_fn, self.check_fn, self.entities_fn, self.result_fn, self.failure_fn]


def _allow(function: lambda_.Function, actions: list[str], resources: list[str]) -> None:
    function.add_to_role_policy(iam.PolicyStatement(actions=actions, resources=resources))
