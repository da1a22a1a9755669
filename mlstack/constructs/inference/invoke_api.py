"""`InvokeApi`: an HTTPS URL with IAM auth in front of one SageMaker endpoint (Lambda function URL)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack import resources
from mlstack.constructs.inference.model_endpoint import ModelEndpoint
from mlstack.constructs.scanners import skip_checkov, skip_guard_on_functions_outside_vpc
from mlstack.constructs.security.function_role import function_role_and_logs, python_function

HANDLER_DIR = resources.runtime_path("invoke")
"""`runtime/invoke/`: the handler code, tested against moto in tests/runtime."""


class InvokeApi(Construct):
    """A Lambda function URL (AuthType AWS_IAM) that forwards POST bodies to `endpoint` with InvokeEndpoint.

    Callers need both `lambda:InvokeFunctionUrl` and `lambda:InvokeFunction` on the function (Lambda's
    function-URL authorization asks for both since October 2025; `grant_invoke_url` grants both) and sign with
    SigV4; there is no anonymous access.

    Timeouts: SageMaker's InvokeEndpoint answers within 60 s or fails, so the handler's read timeout is
    `timeout - 5` s (65 s at the default 70 s: just above SageMaker's limit) and the function's own timeout just
    above it; a slow model gets a JSON 504, not a bare 502. `max_payload_bytes` is the endpoint's request limit
    (6 MB real-time, 4 MB serverless): larger bodies get a 413 without calling SageMaker.

    The function's role may invoke this endpoint only and write its own log group, which is encrypted with `key` and
    kept per `removal_policy`. The function runs outside the VPC: it calls only the SageMaker runtime API, and no
    host in the VPC accepts connections from it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: ModelEndpoint,
        key: kms.IKey,
        removal_policy: RemovalPolicy,
        timeout: Duration = Duration.seconds(70),  # noqa: B008 - immutable
        memory_size: int = 256,
        max_payload_bytes: int = 6 * 1024 * 1024,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group, self.role = function_role_and_logs(
            self,
            log_group_id="LogGroup",
            role_id="Role",
            description="Invoke API: call one SageMaker endpoint, write its own logs",
            key=key,
            retention=log_retention,
            removal_policy=removal_policy,
        )
        self.function = python_function(
            self,
            "Function",
            code_dir=HANDLER_DIR,
            role=self.role,
            timeout=timeout,
            memory_size=memory_size,
            log_group=self.log_group,
            # The handler's read timeout: below the function's, so a slow model gets a JSON 504, not a bare 502.
            environment={
                "ENDPOINT_NAME": endpoint.endpoint_name,
                "INVOKE_TIMEOUT_SECONDS": str(max(1, int(timeout.to_seconds()) - 5)),
                "MAX_PAYLOAD_BYTES": str(max_payload_bytes),
            },
            description="HTTPS (IAM auth) -> SageMaker InvokeEndpoint",
        )
        # InvokeEndpoint only (the handler does not stream): narrower than endpoint.grant_invoke.
        iam.Grant.add_to_principal(
            grantee=self.function, actions=["sagemaker:InvokeEndpoint"], resource_arns=[endpoint.endpoint_arn]
        )
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)
        skip_guard_on_functions_outside_vpc(
            self.function, "calls only the SageMaker runtime API (InvokeEndpoint) and reads no VPC resource"
        )
        skip_checkov(
            self.function,
            {
                "CKV_AWS_115": "the endpoint's instance count bounds throughput; a reserved concurrency would cap the "
                "API below the endpoint's capacity and take capacity from the account pool",
                "CKV_AWS_116": "invoked synchronously through its function URL, so the caller gets every error; a DLQ "
                "only receives failed asynchronous invocations",
                "CKV_AWS_117": "calls only the SageMaker runtime API, IAM-authenticated over HTTPS, and stores no "
                "data; outside the VPC it needs no NAT gateway or interface endpoint",
                "CKV_AWS_173": "its environment holds the endpoint name and a timeout, no secret; Lambda encrypts it "
                "at rest with an AWS-owned key",
            },
        )

    @property
    def url_string(self) -> str:
        return self.url.url

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` call the URL: lambda:InvokeFunctionUrl and lambda:InvokeFunction on this function (both
        are checked for AWS_IAM function URLs). An identity policy for a principal of this app, a resource-based
        permission for another (e.g. an `iam.ArnPrincipal` of an existing role)."""
        # aws-cdk-lib's grant_invoke_url grants both actions (InvokeFunction only via the function URL).
        return self.function.grant_invoke_url(grantee)
