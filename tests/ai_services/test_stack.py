"""AiServicesStack from the session synth of `document-ai`, and the constructs used from a plain CDK Stack."""

from __future__ import annotations

import itertools
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template

from mlstack.constructs.ai_services import AiServiceApi, DocumentPipeline, Guardrail
from tests.conftest import selected_blueprints
from tests.synth import Session

NAME = "document-ai"


@pytest.fixture(scope="module")
def template(session: Session) -> dict[str, Any]:
    if NAME not in selected_blueprints():
        pytest.skip("MLSTACK_TEST_BLUEPRINTS narrowed the session to other blueprints")
    result: dict[str, Any] = session.blueprints[NAME].templates["AiServicesStack"]
    return result


def _of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _definition(template: dict[str, Any]) -> dict[str, Any]:
    (machine,) = _of(template, "AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))  # type: ignore[no-any-return]


def test_state_machine_states_in_order(template: dict[str, Any]) -> None:
    definition = _definition(template)
    states = definition["States"]
    assert definition["StartAt"] == "Document"
    path = ["Document", "StartAnalysis", "WaitForTextract", "CheckAnalysis"]
    for here, there in itertools.pairwise(path):
        assert states[here]["Next"] == there
    choice = states["TextractDone?"]
    assert choice["Choices"] == [{"Variable": "$.status", "StringEquals": "IN_PROGRESS", "Next": "WaitForTextract"}]
    assert choice["Default"] == "ExtractEntities"
    assert states["ExtractEntities"]["Next"] == "WriteResult"
    assert states["WriteResult"]["Next"] == "IndexResult"
    assert states["IndexResult"]["Next"] == "Indexed"
    assert states["Indexed"]["Type"] == "Succeed"
    assert states["WaitForTextract"]["Seconds"] == 10


def test_entities_run_per_piece_in_a_bounded_map_state(template: dict[str, Any]) -> None:
    entities = _definition(template)["States"]["ExtractEntities"]
    assert entities["Type"] == "Map"
    assert entities["ItemsPath"] == "$.chunks" and entities["ResultPath"] == "$.parts"
    assert entities["MaxConcurrency"] == 4
    assert entities["ItemSelector"]["chunk.$"] == "$$.Map.Item.Value"
    processor = entities["ItemProcessor"]
    assert processor["StartAt"] == "ExtractChunk"
    (chunk,) = processor["States"].values()
    assert chunk["End"] is True
    fns = _of(template, "AWS::Lambda::Function")
    handlers = {f["Properties"]["Handler"]: f["Properties"] for f in fns.values()}
    assert {h for h in handlers if h.startswith("tasks.")} == {
        "tasks.start_analysis",
        "tasks.check_analysis",
        "tasks.extract_chunk",
        "tasks.write_result",
        "tasks.record_failure",
    }
    # Collecting a 3,000-page text is the only step that grows with the document: Lambda's 15 minutes.
    assert handlers["tasks.check_analysis"]["Timeout"] == 900
    assert handlers["tasks.check_analysis"]["Environment"]["Variables"]["MAX_PAGES"] == "3000"
    assert handlers["tasks.extract_chunk"]["Timeout"] == 300


def _tasks(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    states = dict(_definition(template)["States"])
    states.update(states["ExtractEntities"]["ItemProcessor"]["States"])
    return states


def test_every_task_retries_with_backoff_and_catches_to_the_failure_prefix(template: dict[str, Any]) -> None:
    states = _tasks(template)
    for name in ("StartAnalysis", "CheckAnalysis", "ExtractChunk", "WriteResult"):
        busy, throttled, timeout = states[name]["Retry"]
        assert "ServiceBusyError" in busy["ErrorEquals"] and "Lambda.ServiceException" in busy["ErrorEquals"]
        assert (busy["IntervalSeconds"], busy["MaxAttempts"], busy["BackoffRate"]) == (2, 5, 2)
        assert busy["JitterStrategy"] == "FULL"
        # Throttling waits for Textract's quotas: 10 s doubling to 300 s, 8 attempts (about 20 minutes).
        assert throttled["ErrorEquals"] == ["ThrottledError"]
        assert (throttled["IntervalSeconds"], throttled["MaxAttempts"], throttled["BackoffRate"]) == (10, 8, 2)
        assert throttled["MaxDelaySeconds"] == 300 and throttled["JitterStrategy"] == "FULL"
        assert timeout["ErrorEquals"] == ["States.Timeout", "Lambda.Unknown", "Sandbox.Timedout"]
        assert timeout["MaxAttempts"] == 1
        assert states[name]["TimeoutSeconds"] in (360, 960)
    for name in ("StartAnalysis", "CheckAnalysis", "ExtractEntities", "WriteResult", "IndexResult"):
        assert states[name]["Catch"] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "RecordFailure"}
        ]
    states = _definition(template)["States"]
    # Failure path: copy under failed/ with the reason, index FAILED, then fail; if that breaks, the DLQ.
    assert states["RecordFailure"]["Next"] == "IndexFailure"
    assert states["IndexFailure"]["Next"] == "DocumentFailed"
    assert states["DocumentFailed"]["Type"] == "Fail"
    for name in ("RecordFailure", "IndexFailure"):
        assert states[name]["Catch"][0]["Next"] == "SendToDeadLetterQueue"
    assert states["SendToDeadLetterQueue"]["Resource"].endswith(":states:::sqs:sendMessage")
    assert states["SendToDeadLetterQueue"]["Next"] == "DocumentFailed"
    assert states["IndexFailure"]["Parameters"]["Item"]["status"] == {"S": "FAILED"}


def _statements_of(template: dict[str, Any], handler: str) -> list[dict[str, Any]]:
    fns = _of(template, "AWS::Lambda::Function")
    (fn,) = [f for f in fns.values() if f["Properties"]["Handler"] == handler]
    role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        s
        for p in _of(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_textract_permissions_are_exactly_text_detection(template: dict[str, Any]) -> None:
    textract = {
        handler: sorted(
            a
            for s in _statements_of(template, handler)
            for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
            if a.startswith("textract:")
        )
        for handler in ("tasks.start_analysis", "tasks.check_analysis", "tasks.extract_chunk", "tasks.write_result")
    }
    assert textract == {
        "tasks.start_analysis": ["textract:StartDocumentTextDetection"],
        "tasks.check_analysis": ["textract:GetDocumentTextDetection"],
        "tasks.extract_chunk": [],
        "tasks.write_result": [],
    }


def test_failure_handler_writes_under_the_failure_prefix_only(template: dict[str, Any]) -> None:
    fns = _of(template, "AWS::Lambda::Function")
    (failure,) = [f for f in fns.values() if f["Properties"]["Handler"] == "tasks.record_failure"]
    assert failure["Properties"]["Environment"]["Variables"]["FAILED_PREFIX"] == "failed/"
    role = failure["Properties"]["Role"]["Fn::GetAtt"][0]
    puts = [
        s
        for p in _of(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "s3:PutObject"
    ]
    (put,) = puts
    assert put["Resource"]["Fn::Join"][1][-1] == "/failed/*"


def test_state_machine_logs_are_encrypted_and_traced(template: dict[str, Any]) -> None:
    (machine,) = _of(template, "AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    for group in _of(template, "AWS::Logs::LogGroup").values():
        assert "KmsKeyId" in group["Properties"] and group["Properties"]["RetentionInDays"] == 365


def test_upload_rule_starts_the_machine_with_a_dead_letter_queue(template: dict[str, Any]) -> None:
    (rule,) = _of(template, "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["object"] == {"key": [{"prefix": "input/"}]}
    (target,) = rule["Properties"]["Targets"]
    assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 8
    buckets = _of(template, "AWS::S3::Bucket")
    documents = [b for b in buckets.values() if "NotificationConfiguration" in b["Properties"]]
    (doc,) = documents
    assert doc["Properties"]["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    assert (
        doc["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
            "SSEAlgorithm"
        ]
        == "aws:kms"
    )
    (table,) = _of(template, "AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"]["SSEType"] == "KMS"
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_pipeline_alarms_notify_the_encrypted_alarm_topic(template: dict[str, Any]) -> None:
    ((topic_id, topic),) = _of(template, "AWS::SNS::Topic").items()
    assert "KmsMasterKeyId" in topic["Properties"]
    alarms = _of(template, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 2
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    (policy,) = _of(template, "AWS::SNS::TopicPolicy").values()
    sids = [s["Sid"] for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    assert sids == ["AllowPublishThroughSSLOnly", "AllowCloudWatchAlarms"]
    assert template["Outputs"]["AlarmTopicArn"] == {"Value": {"Ref": topic_id}}


def test_iam_has_no_wildcard_actions_and_star_resources_only_for_unscoped_apis(template: dict[str, Any]) -> None:
    unscoped = {
        "comprehend:DetectSentiment",
        "comprehend:DetectEntities",
        "comprehend:DetectPiiEntities",
        "textract:AnalyzeDocument",
        "textract:StartDocumentTextDetection",
        "textract:GetDocumentTextDetection",
        # Step Functions' own log delivery and X-Ray calls (CDK-generated).
        "logs:CreateLogDelivery",
        "logs:GetLogDelivery",
        "logs:UpdateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:DescribeResourcePolicies",
        "logs:DescribeLogGroups",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
    }
    for policy in _of(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            for action in actions:
                assert action != "*" and not action.endswith(":*"), action
            if statement["Resource"] == "*":
                assert set(actions) <= unscoped, actions


def test_bedrock_is_scoped_to_the_model_arn_with_an_empty_account(template: dict[str, Any]) -> None:
    statements = [
        s
        for p in _of(template, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "bedrock:InvokeModel"
    ]
    (statement,) = statements
    assert statement["Resource"] == "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"


def test_api_routes_use_iam_auth_and_the_stage_is_throttled_and_logged(template: dict[str, Any]) -> None:
    routes = {r["Properties"]["RouteKey"]: r["Properties"] for r in _of(template, "AWS::ApiGatewayV2::Route").values()}
    assert set(routes) == {
        "POST /comprehend/sentiment",
        "POST /comprehend/entities",
        "POST /comprehend/pii",
        "POST /textract/analyze",
        "POST /bedrock/converse",
    }
    assert {r["AuthorizationType"] for r in routes.values()} == {"AWS_IAM"}
    (stage,) = _of(template, "AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == "$default"
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 40, "ThrottlingRateLimit": 20}
    assert "DestinationArn" in props["AccessLogSettings"]
    # HTTP API variables only: $context.resourcePath is a REST-API variable and logs nothing on an HTTP API.
    fields = json.loads(props["AccessLogSettings"]["Format"])
    assert fields["routeKey"] == "$context.routeKey"
    assert fields["integrationError"] == "$context.integrationErrorMessage"
    assert fields["status"] == "$context.status"
    assert "resourcePath" not in props["AccessLogSettings"]["Format"]
    (fn,) = [
        f
        for f in _of(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "api_handler.handler"
    ]
    assert fn["Properties"]["Timeout"] == 25
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["TIMEOUT_SECONDS"] == "25"  # the handler sizes its clients' read timeouts from it
    assert (
        env["OPERATIONS"] == "comprehend.sentiment,comprehend.entities,comprehend.pii,textract.analyze,bedrock.converse"
    )


def test_constructs_work_in_a_plain_stack_without_a_blueprint() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "TeamStack", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    pool = cognito.UserPool(stack, "Pool")
    client = pool.add_client("App")
    media = s3.Bucket(stack, "Media", encryption=s3.BucketEncryption.KMS, encryption_key=key)
    topic = sns.Topic(stack, "Alerts")
    DocumentPipeline(stack, "Docs", key=key, removal_policy=cdk.RemovalPolicy.DESTROY, alarm_topic=topic)
    AiServiceApi(
        stack,
        "Api",
        operations=["translate.text", "transcribe.start", "bedrock.converse"],
        key=key,
        user_pool=pool,
        user_pool_clients=[client],
        bedrock_model_ids=["amazon.nova-micro-v1:0"],
        guardrail=Guardrail("gr1abc", "3"),
        media_bucket=media,
    )
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert {a["Properties"]["MetricName"] for a in alarms.values()} == {
        "ExecutionsFailed",
        "ApproximateNumberOfMessagesVisible",
    }
    assert all(len(a["Properties"]["AlarmActions"]) == 1 for a in alarms.values())
    template.has_resource_properties("AWS::ApiGatewayV2::Authorizer", {"AuthorizerType": "JWT"})
    template.has_resource_properties("AWS::ApiGatewayV2::Route", {"AuthorizationType": "JWT"})
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "bedrock:ApplyGuardrail",
                                "Resource": {
                                    "Fn::Join": [
                                        "",
                                        [
                                            "arn:",
                                            {"Ref": "AWS::Partition"},
                                            ":bedrock:eu-west-1:123456789012:guardrail/gr1abc",
                                        ],
                                    ]
                                },
                            }
                        )
                    ]
                )
            }
        },
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operations": ["speech.recognize"]}, "operations: unknown or none"),
        ({"operations": ["bedrock.converse"]}, "bedrock_model_ids: give them exactly when"),
        ({"operations": ["transcribe.start"]}, "media_bucket: transcribe.start needs"),
        ({"operations": ["comprehend.pii"], "timeout": cdk.Duration.seconds(30)}, "timeout: at most 29 s"),
    ],
)
def test_api_construct_rejects_bad_props(kwargs: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(ValueError, match=message):
        AiServiceApi(stack, "Api", key=kms.Key(stack, "K"), **kwargs)
