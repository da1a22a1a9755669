"""`AiServicesStack`'s resources: the access-log bucket, `DocumentPipeline` with its alarm topic, `AiServiceApi`."""

from __future__ import annotations

from collections import Counter

from mlstack.config.ai_services import AiServicesConfig, ApiConfig
from mlstack.design.ai_services import has_alarm_topic, needs_media_bucket
from mlstack.design.footprint.parts import (
    ALARM,
    LOG_GROUP,
    PERMISSION,
    QUEUE,
    QUEUE_POLICY,
    RULE,
    Footprint,
    bucket,
    function,
    role,
    topic,
)

DOCUMENT_FUNCTIONS = 5
"""StartAnalysis, CheckAnalysis, ExtractEntities, WriteResult, RecordFailure (`DocumentPipeline`)."""


def document_pipeline() -> Footprint:
    """`DocumentPipeline`: documents bucket, index table, upload rule (its role starts the state machine), the
    task functions, the state machine (role, policy, log group), the dead-letter queue and two alarms."""
    found = bucket() + Counter({"AWS::DynamoDB::Table": 1, RULE: 1, QUEUE: 1, QUEUE_POLICY: 1, ALARM: 2, LOG_GROUP: 1})
    found["AWS::StepFunctions::StateMachine"] = 1
    for _ in range(DOCUMENT_FUNCTIONS):
        found += function()
    return found + role() + role()  # the state machine's, the rule's


def ai_service_api(api: ApiConfig) -> Footprint:
    """`AiServiceApi`: an HTTP API with a stage (its access-log group), one Lambda integration, a route and an
    invoke permission per operation, the handler (role, policy, log group), a Cognito authorizer if asked."""
    operations = len(api.operations)
    found = function() + Counter(
        {
            "AWS::ApiGatewayV2::Api": 1,
            "AWS::ApiGatewayV2::Stage": 1,
            "AWS::ApiGatewayV2::Integration": 1,
            "AWS::ApiGatewayV2::Route": operations,
            PERMISSION: operations,
            LOG_GROUP: 1,
        }
    )
    if api.cognito_user_pool_id is not None:
        found["AWS::ApiGatewayV2::Authorizer"] = 1
    return found


def ai_services_stack(ai: AiServicesConfig) -> Footprint:
    found = bucket()  # access logs
    if has_alarm_topic(ai):
        found += topic(len(ai.alarm_emails))
    if ai.document_pipeline is not None:
        found += document_pipeline()
    if needs_media_bucket(ai):
        found += bucket()
    if ai.api is not None:
        found += ai_service_api(ai.api)
    return found
