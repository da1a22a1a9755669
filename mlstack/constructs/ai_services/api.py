"""`AiServiceApi`: an authenticated HTTPS API (API Gateway HTTP API) over chosen managed AI service operations."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import jsii
from aws_cdk import Aspects, Duration, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from mlstack import resources
from mlstack.constructs.ai_services.document_pipeline import LAMBDA_CHECKOV_SKIPS
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import (
    acknowledge_nag,
    nag_id,
    skip_checkov,
    skip_guard,
    skip_guard_on_functions_outside_vpc,
    skip_iam_lint,
)
from mlstack.constructs.security.function_role import function_role_and_logs, python_function

HANDLER_DIR = resources.runtime_path("ai_services")
"""`runtime/ai_services/`: `api_handler.py`, tested with a stubbed botocore in tests/ai_services."""

# Comprehend, Translate, Rekognition, Textract and Transcribe list no resource type for these actions in the
# service authorization reference ("Actions, resources, and condition keys for Amazon Comprehend", ... for
# Amazon Translate, Amazon Rekognition, Amazon Textract, Amazon Transcribe): the statement's resource is "*".
UNSCOPED_ACTIONS: dict[str, tuple[str, ...]] = {
    "comprehend.sentiment": ("comprehend:DetectSentiment",),
    "comprehend.entities": ("comprehend:DetectEntities",),
    "comprehend.pii": ("comprehend:DetectPiiEntities",),
    # SourceLanguageCode 'auto' makes Translate call Comprehend DetectDominantLanguage as the caller.
    "translate.text": ("translate:TranslateText", "comprehend:DetectDominantLanguage"),
    "rekognition.labels": ("rekognition:DetectLabels",),
    "rekognition.moderation": ("rekognition:DetectModerationLabels",),
    "rekognition.text": ("rekognition:DetectText",),
    "textract.analyze": ("textract:AnalyzeDocument",),
    "transcribe.start": ("transcribe:StartTranscriptionJob",),
}
"""Operation -> the only actions its handler calls, on resource "*" (see the comment above)."""

OPERATIONS = (*UNSCOPED_ACTIONS, "bedrock.converse")

MEDIA_PREFIX = "media/"
TRANSCRIPT_PREFIX = "transcripts/"


HTTP_API_ACCESS_LOG_FIELDS: dict[str, str] = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
    "userArn": "$context.identity.userArn",
    "httpMethod": "$context.httpMethod",
    "routeKey": "$context.routeKey",
    "path": "$context.path",
    "protocol": "$context.protocol",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationStatus": "$context.integration.status",
    "integrationLatency": "$context.integration.latency",
    "integrationError": "$context.integrationErrorMessage",
    "authorizerError": "$context.authorizer.error",
    "error": "$context.error.message",
}
"""One JSON object per request, in HTTP API variables only ("Customize HTTP API access logs", API Gateway
Developer Guide, https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-logging-variables.html).
REST-API variables such as `$context.resourcePath` (what `AccessLogFormat.json_with_standard_fields` writes) are
not among them and log nothing; `routeKey` names the route, `integrationError` why the function call failed."""


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    """JSON access logs with HTTP API variables (`HTTP_API_ACCESS_LOG_FIELDS`) to `destination`."""

    def __init__(self, destination: apigwv2.IAccessLogDestination) -> None:
        self._destination = destination

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(json.dumps(HTTP_API_ACCESS_LOG_FIELDS, separators=(",", ":")))


@dataclass(frozen=True)
class Guardrail:
    """A Bedrock guardrail (created outside this construct) and the published version to apply."""

    guardrail_id: str
    version: str


def route_path(operation: str) -> str:
    """`comprehend.sentiment` -> `/comprehend/sentiment` (the handler uses the same mapping)."""
    return "/" + operation.replace(".", "/")


@jsii.implements(IAspect)
class _InvokePermissionsNameTheAccount:
    def visit(self, node: IConstruct) -> None:
        if isinstance(node, lambda_.CfnPermission) and node.source_account is None:
            node.source_account = Stack.of(node).account
            skip_guard(
                node,
                {
                    "CT.LAMBDA.PR.2": "bounded: SourceArn names this API's execute-api ARN and SourceAccount this "
                    "account; the control's static check reads the AWS::AccountId pseudo parameter as no string",
                },
            )


class AiServiceApi(Construct):
    """`POST /<service>/<action>` for each of `operations`, on an HTTP API with IAM auth (default) or Cognito.

    - Auth: IAM (callers sign with SigV4 and need execute-api:Invoke on the route: `grant_invoke`), or a
      Cognito user pool's JWTs when `user_pool` is given (audience: `user_pool_clients`).
    - Throttling: the `$default` stage limits the whole API to `throttle_rate_limit` requests/s with bursts of
      `throttle_burst_limit` (defaults 50 and 100); excess requests get 429 from API Gateway.
    - The handler's role may call only the actions of the chosen operations: Bedrock only on the ARNs of
      `bedrock_model_ids` (and `guardrail`), Transcribe media only under `media/` of `media_bucket`.
    - Access logs and function logs go to log groups encrypted with `key`, kept `log_retention` (one year).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operations: Sequence[str],
        key: kms.IKey,
        removal_policy: RemovalPolicy = RETAINED,
        user_pool: cognito.IUserPool | None = None,
        user_pool_clients: Sequence[cognito.IUserPoolClient] = (),
        language: str = "en",
        bedrock_model_ids: Sequence[str] = (),
        guardrail: Guardrail | None = None,
        max_tokens: int = 1024,
        media_bucket: s3.IBucket | None = None,
        throttle_rate_limit: float = 50,
        throttle_burst_limit: int = 100,
        timeout: Duration = Duration.seconds(25),  # noqa: B008 - immutable
        memory_size: int = 512,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
    ) -> None:
        super().__init__(scope, construct_id)
        unknown = sorted(set(operations) - set(OPERATIONS))
        if unknown or not operations:
            raise ValueError(f"operations: unknown or none {unknown}; choose from {', '.join(OPERATIONS)}")
        if ("bedrock.converse" in operations) != bool(bedrock_model_ids):
            raise ValueError("bedrock_model_ids: give them exactly when bedrock.converse is an operation")
        if "transcribe.start" in operations and media_bucket is None:
            raise ValueError("media_bucket: transcribe.start needs the bucket its media and transcripts live in")
        if timeout.to_seconds() > 29:
            raise ValueError("timeout: at most 29 s; API Gateway HTTP APIs stop waiting for an integration at 30 s")
        if user_pool_clients and user_pool is None:
            raise ValueError("user_pool_clients: only with a user_pool")
        if user_pool is not None and not user_pool_clients:
            raise ValueError("user_pool_clients: name the app clients whose tokens the API accepts")
        self.operations = tuple(operations)
        stack = Stack.of(self)
        # The handler sizes its clients' read timeouts (and Bedrock's single attempt) from the function's timeout.
        environment = {
            "OPERATIONS": ",".join(operations),
            "LANGUAGE": language,
            "TIMEOUT_SECONDS": str(int(timeout.to_seconds())),
        }
        if bedrock_model_ids:
            environment |= {"BEDROCK_MODEL_IDS": ",".join(bedrock_model_ids), "BEDROCK_MAX_TOKENS": str(max_tokens)}
        if guardrail is not None:
            environment |= {"GUARDRAIL_ID": guardrail.guardrail_id, "GUARDRAIL_VERSION": guardrail.version}
        if "transcribe.start" in operations and media_bucket is not None:
            environment |= {
                "MEDIA_BUCKET": media_bucket.bucket_name,
                "MEDIA_PREFIX": MEDIA_PREFIX,
                "TRANSCRIPT_PREFIX": TRANSCRIPT_PREFIX,
                "OUTPUT_KEY_ID": key.key_arn,
            }

        self.log_group, self.role = function_role_and_logs(
            self,
            log_group_id="FunctionLogs",
            role_id="Role",
            description="AI service API: the chosen service actions, its own logs",
            key=key,
            retention=log_retention,
            removal_policy=removal_policy,
        )
        unscoped = sorted({a for op in operations for a in UNSCOPED_ACTIONS.get(op, ())})
        if unscoped:
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=unscoped, resources=["*"]))
            acknowledge_nag(
                self.role,
                {
                    "AwsSolutions-IAM5[Resource::*]": f"{', '.join(unscoped)} support no resource-level permissions "
                    "(AWS service authorization reference, Actions, resources, and condition keys)"
                },
            )
        if bedrock_model_ids:
            models = [
                f"arn:{stack.partition}:bedrock:{stack.region}::foundation-model/{model}" for model in bedrock_model_ids
            ]
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=models))
            policy = self.role.node.find_child("DefaultPolicy").node.default_child
            assert policy is not None
            skip_iam_lint(
                policy,
                {
                    "RESOURCE_MISMATCH bedrock:InvokeModel": "InvokeModel's resource types (foundation model, "
                    "inference profile, provisioned model...) are alternatives: a call names one model, and the "
                    "policy names the foundation-model ARNs of exactly the blueprint's models (the lint also cannot "
                    "parse a model ID with a colon, amazon.nova-lite-v1:0)",
                },
            )
        if guardrail is not None:
            arn = stack.format_arn(service="bedrock", resource="guardrail", resource_name=guardrail.guardrail_id)
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["bedrock:ApplyGuardrail"], resources=[arn]))
        if "transcribe.start" in operations and media_bucket is not None:
            # Transcribe reads the media and writes the transcript with the caller's permissions.
            media = media_bucket.arn_for_objects(f"{MEDIA_PREFIX}*")
            transcripts = media_bucket.arn_for_objects(f"{TRANSCRIPT_PREFIX}*")
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[media]))
            self.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[transcripts]))
            key.grant_encrypt_decrypt(self.role)
            acknowledge_nag(
                self.role,
                {
                    f"AwsSolutions-IAM5[Resource::{nag_id(stack, media)}]": "media objects under media/ only",
                    f"AwsSolutions-IAM5[Resource::{nag_id(stack, transcripts)}]": "transcripts under transcripts/",
                    "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]": "KMS grant on the project key only",
                    "AwsSolutions-IAM5[Action::kms:ReEncrypt*]": "KMS grant on the project key only",
                },
            )
        self.function = python_function(
            self,
            "Function",
            handler="api_handler.handler",
            code_dir=HANDLER_DIR,
            exclude=["doc_pipeline"],
            role=self.role,
            timeout=timeout,
            memory_size=memory_size,
            log_group=self.log_group,
            environment=environment,
            description="AI service API: validate, call the service, map its errors",
        )
        skip_checkov(self.function, LAMBDA_CHECKOV_SKIPS)
        skip_guard_on_functions_outside_vpc(
            self.function,
            "calls only regional AWS APIs (Comprehend, Translate, Rekognition, Textract, Transcribe, "
            "Bedrock, S3) and reads no VPC resource",
        )

        authorizer: apigwv2.IHttpRouteAuthorizer = (
            authorizers.HttpIamAuthorizer()
            if user_pool is None
            else authorizers.HttpUserPoolAuthorizer("Cognito", user_pool, user_pool_clients=list(user_pool_clients))
        )
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            description="mlstack AI service API",
            create_default_stage=False,
            default_authorizer=authorizer,
        )
        integration = integrations.HttpLambdaIntegration("Handler", self.function)
        self.routes: dict[str, apigwv2.HttpRoute] = {}
        for operation in operations:
            (route,) = self.http_api.add_routes(
                path=route_path(operation), methods=[apigwv2.HttpMethod.POST], integration=integration
            )
            self.routes[operation] = route
        # The invoke permissions the integration adds (when the routes bind, after this constructor) name this
        # API's execute-api ARN; the account too, so that the service principal is bounded the way the Control
        # Tower control CT.LAMBDA.PR.2 asks.
        Aspects.of(self.http_api).add(_InvokePermissionsNameTheAccount())
        self.access_log_group = logs.LogGroup(
            self, "AccessLogs", encryption_key=key, retention=log_retention, removal_policy=removal_policy
        )
        # HTTP API access logs need only log-delivery permissions of the deployer ("Configuring logging for an
        # HTTP API", API Gateway Developer Guide), not the account-wide CloudWatch role REST API stages need.
        self.stage = apigwv2.HttpStage(
            self,
            "Stage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=throttle_rate_limit, burst_limit=throttle_burst_limit),
            access_log_settings=_AccessLogs(apigwv2.LogGroupLogDestination(self.access_log_group)),
        )

    @property
    def url(self) -> str:
        return self.stage.url

    def grant_invoke(self, grantee: iam.IGrantable) -> list[iam.Grant]:
        """Let `grantee` call every route (execute-api:Invoke on each route's POST; IAM auth only)."""
        return [route.grant_invoke(grantee) for route in self.routes.values()]
