"""`ApprovalDeploy`: the newest approved model package version serves on one endpoint, which is then monitored.

Deploy order, as SageMaker sees it: the first deploy creates no endpoint (no model is approved yet). Approving (or
rejecting) a version fires "SageMaker Model Package State Change"; the function creates or updates the endpoint, with
data capture on, to the newest Approved version. When the endpoint reaches IN_SERVICE, "SageMaker Endpoint State
Change" fires and the function applies any approval that arrived meanwhile, then creates the data-quality schedule
against the baseline registered with the serving version (CreateMonitoringSchedule needs the endpoint to exist).
A deploy that changes the serving or monitoring settings runs the same reconcile once, through
`Custom::EndpointReconcile`: the handler names configs and definitions after a hash of those settings, so the
serving endpoint and its schedule move to them.
Handler: `runtime/approval_deploy/handler.py`.

Serialisation without reserved concurrency (which fails the deploy in accounts whose unreserved concurrency would
fall below 100, as in new accounts): the handler reconciles from the registry and the endpoint on every event, a
change that meets a busy endpoint is deferred to that endpoint's IN_SERVICE event, and SageMaker itself refuses a
second change of an endpoint that is changing.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, CfnResource, CustomResource, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from mlstack import resources
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.sagemaker.approval_alarms import FAILED_DEPLOYMENT_PATTERN, add_alarms
from mlstack.constructs.sagemaker.grants import acknowledge_wildcards, grant_volume_key, grant_vpc_and_logs
from mlstack.constructs.scanners import skip_checkov, skip_guard, skip_guard_on_functions_outside_vpc
from mlstack.constructs.security.function_role import function_role_and_logs, python_function
from mlstack.constructs.security.groups import closed_security_group

HANDLER_DIR = resources.runtime_path("approval_deploy")
CAPTURE_PREFIX = "capture"
MONITORING_PREFIX = "monitoring"
"""Logs filter pattern (a quoted term: the literal text, anywhere in the event) for the handler's decision line
`{"action": "failed-deployment", ...}`; no other action, reason or runtime line contains that text."""
RECONCILE_SETTINGS = (
    "INSTANCE_TYPE",
    "INSTANCE_COUNT",
    "CAPTURE_PERCENT",
    "CAPTURE_URI",
    "VOLUME_KMS",
    "KMS_KEY_ARN",
    "SUBNET_IDS",
    "SECURITY_GROUP_IDS",
    "MONITOR_IMAGE",
    "MONITOR_INSTANCE_TYPE",
    "MONITOR_VOLUME_KMS",
    "MONITOR_SCHEDULE",
)
"""Environment variables whose change the stack's custom resource applies at deploy time (the handler's
SERVING_SETTINGS and MONITOR_SETTINGS, plus the schedule expression)."""


class ApprovalDeploy(Construct):
    """An EventBridge rule per event (approval, endpoint in service) and the function that acts on them.

    Props (keyword): `model_package_group_name`; `endpoint_name` (created by the function, not by
    CloudFormation); `artifacts_bucket` (model artifacts and baselines under `runs/`, capture under `capture/`,
    monitoring reports under `monitoring/`); `key`; `vpc`/`subnets` (model and monitoring jobs); `instance_type` and
    `instance_count` of the endpoint (default 1); `volume_key` (default True: encrypt the endpoint's volume with
    `key`; False for hosts with local NVMe, where SageMaker rejects a volume key); `capture_percent` (default 100);
    `monitor_image` (Model Monitor analyzer); `monitor_instance_type` (default ml.m7i.large); `monitor_volume_key`
    (default True; False for a monitoring type with local NVMe); `monitor_schedule` (default hourly);
    `removal_policy` (the function's log group); `alarm_topic` (default None: no alarms; given: the function's
    errors, a message in the dead-letter queue, an endpoint that goes Failed, a deployment the function reports
    failed (SageMaker rolled the update back), and monitoring runs that find violations or fail notify it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_package_group_name: str,
        endpoint_name: str,
        artifacts_bucket: s3.IBucket,
        key: kms.IKey,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        instance_type: str,
        monitor_image: str,
        instance_count: int = 1,
        volume_key: bool = True,
        capture_percent: int = 100,
        monitor_instance_type: str = "ml.m7i.large",
        monitor_volume_key: bool = True,
        monitor_schedule: str = "cron(0 * ? * * *)",
        removal_policy: RemovalPolicy = RETAINED,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.endpoint_name = endpoint_name
        self.security_group = closed_security_group(
            self, "EndpointSecurityGroup", vpc=vpc, description=f"{endpoint_name} model containers and monitoring jobs"
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "S3 over HTTPS")
        self.model_role = iam.Role(
            self,
            "ModelRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{endpoint_name} model: read artifacts of {model_package_group_name} runs",
        )
        self.monitor_role = iam.Role(
            self,
            "MonitorRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{endpoint_name} data-quality monitoring jobs",
        )
        runs = artifacts_bucket.arn_for_objects("runs/*")
        self.model_role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[runs]))
        # SageMaker writes the endpoint's captured requests with the model's execution role.
        self.model_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[artifacts_bucket.arn_for_objects(f"{CAPTURE_PREFIX}/*")]
            )
        )
        self.monitor_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[runs, artifacts_bucket.arn_for_objects(f"{CAPTURE_PREFIX}/*")]
            )
        )
        self.monitor_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[artifacts_bucket.arn_for_objects(f"{MONITORING_PREFIX}/*")]
            )
        )
        self.monitor_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{CAPTURE_PREFIX}/*", "runs/*"]}},
            )
        )
        for role in (self.model_role, self.monitor_role):
            key.grant_encrypt_decrypt(role)
            grant_vpc_and_logs(role, vpc, log_groups=("Endpoints", "ProcessingJobs"))
        if monitor_volume_key:
            # The monitoring schedule starts processing jobs with this role as their execution role.
            grant_volume_key(self.monitor_role, key)
        self.log_group, self.role = function_role_and_logs(
            self,
            log_group_id="LogGroup",
            role_id="FunctionRole",
            description=f"deploy approved {model_package_group_name} versions to {endpoint_name}",
            key=key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=removal_policy,
        )
        self._grant_function(stack, model_package_group_name, endpoint_name)
        if volume_key:
            # CreateEndpoint/UpdateEndpoint with an endpoint config that names KmsKeyId: the caller creates the grant.
            grant_volume_key(self.role, key)
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        Validations.of(self.dead_letters).acknowledge(
            Acknowledgment(id="AwsSolutions-SQS3", reason="this queue is the dead-letter queue")
        )
        skip_guard(self.dead_letters, {"CT.SQS.PR.1": "this queue is the dead-letter queue: the end of redrive"})
        # Lambda writes a failed asynchronous event to the dead-letter queue with the function's execution role; the
        # queue is encrypted with `key`, so the role needs GenerateDataKey and Decrypt on it (Amazon SQS Developer
        # Guide, "Key management": producers to an SSE-KMS queue).
        key.grant(self.role, "kms:GenerateDataKey", "kms:Decrypt")
        environment = {
            "ENDPOINT_NAME": endpoint_name,
            "MODEL_PACKAGE_GROUP": model_package_group_name,
            "MODEL_PACKAGE_GROUP_ARN": _arn(stack, "model-package-group", model_package_group_name),
            "MODEL_ROLE_ARN": self.model_role.role_arn,
            "MONITOR_ROLE_ARN": self.monitor_role.role_arn,
            "INSTANCE_TYPE": instance_type,
            "INSTANCE_COUNT": str(instance_count),
            "CAPTURE_PERCENT": str(capture_percent),
            "CAPTURE_URI": artifacts_bucket.s3_url_for_object(CAPTURE_PREFIX),
            "MONITOR_OUTPUT_URI": artifacts_bucket.s3_url_for_object(MONITORING_PREFIX),
            "MONITOR_IMAGE": monitor_image,
            "MONITOR_INSTANCE_TYPE": monitor_instance_type,
            "MONITOR_SCHEDULE": monitor_schedule,
            "MONITOR_VOLUME_KMS": "true" if monitor_volume_key else "false",
            "KMS_KEY_ARN": key.key_arn,
            "VOLUME_KMS": "true" if volume_key else "false",
            "SUBNET_IDS": stack.to_json_string([s.subnet_id for s in subnets]),
            "SECURITY_GROUP_IDS": stack.to_json_string([self.security_group.security_group_id]),
        }
        self.function = python_function(
            self,
            "Function",
            code_dir=HANDLER_DIR,
            role=self.role,
            timeout=Duration.seconds(60),
            memory_size=256,
            log_group=self.log_group,
            dead_letter_queue=self.dead_letters,
            environment=environment,
            description=f"approved {model_package_group_name} version -> endpoint {endpoint_name}; monitoring",
        )
        function = self.function.node.default_child
        assert isinstance(function, CfnResource)
        skip_guard_on_functions_outside_vpc(
            function,
            "calls only the SageMaker control-plane API and reads no VPC resource (the endpoint it creates "
            "gets the VPC settings)",
        )
        skip_checkov(
            function,
            {
                "CKV_AWS_117": "calls only the SageMaker control-plane API; it reaches nothing inside the VPC",
                "CKV_AWS_173": "the environment holds resource names and ARNs only, no secret (encrypted at rest "
                "by Lambda)",
                "CKV_AWS_45": "no secret in the environment: names, ARNs and S3 URIs of this stack",
                "CKV_AWS_115": "no reserved concurrency on purpose: reserving any fails the deploy in accounts whose "
                "unreserved concurrency would fall below 100 (new accounts); the handler reconciles idempotently, so "
                "concurrent invocations are safe",
            },
        )
        # Run the reconcile once per deploy that changes the settings the handler hashes into its resource names
        # (serving and monitoring): CloudFormation sends Update only when these properties change, after it has
        # updated the function's environment (the service token references the function). Without it a changed
        # instance type would wait for the next approval.
        self.reconcile = CustomResource(
            self,
            "Reconcile",
            service_token=self.function.function_arn,
            resource_type="Custom::EndpointReconcile",
            properties={name: environment[name] for name in RECONCILE_SETTINGS},
            service_timeout=Duration.minutes(5),
        )
        self.reconcile.node.add_dependency(self.role)
        self.approval_rule = events.Rule(
            self,
            "ApprovalRule",
            description=f"a {model_package_group_name} version is approved or rejected",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Model Package State Change"],
                detail={
                    "ModelPackageGroupName": [model_package_group_name],
                    "ModelApprovalStatus": ["Approved", "Rejected"],
                },
            ),
            targets=[targets.LambdaFunction(self.function, retry_attempts=4, max_event_age=Duration.hours(2))],
        )
        self.in_service_rule = events.Rule(
            self,
            "InServiceRule",
            description=f"endpoint {endpoint_name} is in service: apply newer approvals, (re)point its monitoring",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Endpoint State Change"],
                detail={"EndpointName": [endpoint_name], "EndpointStatus": ["IN_SERVICE"]},
            ),
            targets=[targets.LambdaFunction(self.function, retry_attempts=4, max_event_age=Duration.hours(2))],
        )

        self.alarms: list[cloudwatch.Alarm] = []
        self.monitoring_rule: events.Rule | None = None
        self.failed_rule: events.Rule | None = None
        if alarm_topic is not None:
            self.alarms, self.failed_rule, self.monitoring_rule = add_alarms(
                self,
                endpoint_name=self.endpoint_name,
                function=self.function,
                dead_letters=self.dead_letters,
                log_group=self.log_group,
                schedule_arn=_arn(stack, "monitoring-schedule", f"{self.endpoint_name}-data-quality".lower()),
                topic=alarm_topic,
            )

    def _grant_function(self, stack: Stack, group: str, endpoint: str) -> None:
        named = [
            _arn(stack, kind, f"{endpoint}-*")
            for kind in ("model", "endpoint-config", "data-quality-job-definition", "monitoring-schedule")
        ]
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadVersions",
                actions=["sagemaker:DescribeModelPackage"],
                resources=[_arn(stack, "model-package", f"{group}/*")],
            )
        )
        # ListModelPackages supports no resource-level permission (Service Authorization Reference, "Actions,
        # resources, and condition keys for Amazon SageMaker AI"); the handler lists only its own group.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(sid="ListVersions", actions=["sagemaker:ListModelPackages"], resources=["*"])
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="Deploy",
                actions=[
                    "sagemaker:CreateModel",
                    "sagemaker:DescribeModel",
                    "sagemaker:CreateEndpointConfig",
                    "sagemaker:DescribeEndpointConfig",
                    "sagemaker:CreateDataQualityJobDefinition",
                    "sagemaker:DescribeDataQualityJobDefinition",
                    "sagemaker:CreateMonitoringSchedule",
                    "sagemaker:DescribeMonitoringSchedule",
                    "sagemaker:UpdateMonitoringSchedule",
                    "sagemaker:AddTags",
                ],
                resources=named,
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="Endpoint",
                actions=[
                    "sagemaker:CreateEndpoint",
                    "sagemaker:UpdateEndpoint",
                    "sagemaker:DescribeEndpoint",
                    "sagemaker:AddTags",
                    "sagemaker:ListTags",
                ],
                resources=[_arn(stack, "endpoint", endpoint), *named[1:2]],
            )
        )
        for role in (self.model_role, self.monitor_role):
            role.grant_pass_role(self.role)
        acknowledge_wildcards(
            self.role,
            f"models, endpoint configs, monitoring definitions and schedules named {endpoint}-*; versions of the "
            f"{group} model package group only; ListModelPackages takes no resource ARN; KMS grant actions on the "
            "project key only",
        )
        for role in (self.model_role, self.monitor_role):
            acknowledge_wildcards(
                role,
                "S3 objects under this project's runs/, capture/ and monitoring/ prefixes; KMS grant actions on the "
                "project key only; ec2:Describe*, ecr:GetAuthorizationToken and PutMetricData take no resource ARN; "
                "ENI create/delete only in this VPC (ec2:Vpc condition); /aws/sagemaker/* log groups",
            )


def _arn(stack: Stack, resource: str, name: str) -> str:
    return stack.format_arn(service="sagemaker", resource=resource, resource_name=name)


__all__ = ["FAILED_DEPLOYMENT_PATTERN", "ApprovalDeploy"]
