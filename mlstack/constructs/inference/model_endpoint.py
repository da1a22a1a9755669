"""`ModelEndpoint`: one SageMaker model served by a real-time, serverless or async endpoint (an L3 over the L1s)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jsii
from aws_cdk import ArnFormat, Aws, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack.config.inference import (
    AsyncEndpointConfig,
    AsyncScalingConfig,
    DataCaptureConfig,
    DlcImage,
    EcrImage,
    RealtimeEndpointConfig,
    ServerlessEndpointConfig,
    VariantConfig,
)
from mlstack.config.inference_fit import startup_limits
from mlstack.constructs.inference.alarms import endpoint_alarms
from mlstack.constructs.nag import acknowledge as _acknowledge
from mlstack.constructs.nag import nag_id as _nag
from mlstack.constructs.scanners import skip_checkov

EndpointSpec = RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig

_ONE_MINUTE = Duration.minutes(1)
_SERVERLESS_VARIANT = "AllTraffic"
_ECR_PULL = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
_INVOKE = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]


@dataclass(frozen=True)
class ServingImage:
    """A container image in ECR and the repository the execution role may pull from."""

    uri: str
    repository_arn: str

    @classmethod
    def from_config(cls, image: EcrImage | DlcImage) -> ServingImage:
        """Same-account repository by name, or a Deep Learning Container by registry account and region."""
        if isinstance(image, EcrImage):
            account, region = Aws.ACCOUNT_ID, Aws.REGION
        else:
            if image.account is None:
                raise ValueError(f"DLC image {image.repository}: resolve its registry account first")
            account, region = image.account, image.region or Aws.REGION
        return cls(
            uri=f"{account}.dkr.ecr.{region}.{Aws.URL_SUFFIX}/{image.repository}:{image.tag}",
            repository_arn=f"arn:{Aws.PARTITION}:ecr:{region}:{account}:repository/{image.repository}",
        )

    @classmethod
    def from_repository(cls, repository: ecr.IRepository, image: EcrImage) -> ServingImage:
        """An image in a repository this app manages (the DataStack's): the pull grant references it, so the
        stacks are ordered; the URI is built from the fixed name (CloudFormation cannot Fn::Split an output)."""
        return cls(uri=cls.from_config(image).uri, repository_arn=repository.repository_arn)

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        token = iam.Grant.add_to_principal(grantee=grantee, actions=["ecr:GetAuthorizationToken"], resource_arns=["*"])
        pull = iam.Grant.add_to_principal(grantee=grantee, actions=_ECR_PULL, resource_arns=[self.repository_arn])
        return token.combine(pull)


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class ModelEndpoint(Construct):
    """A SageMaker model and the endpoint that serves it, in one of three modes.

    Defines an execution role that may read exactly the model artifact, pull exactly the serving image, write
    its logs and (per mode) write data capture / async results under their prefixes and publish to its topics;
    the Model / EndpointConfig / Endpoint trio with physical names left to CloudFormation (a replacement never
    clashes on a name); CloudWatch alarms (see `alarms.py`) that notify `alarm_topic`.

    - real-time: network-isolated model (unless `network_isolation=False`) in the given private subnets behind a
      security group that only allows HTTPS out; one or more weighted variants; EBS volumes encrypted with `key`
      unless a host has local NVMe (SageMaker encrypts it in hardware and rejects a KmsKeyId); target tracking on
      `SageMakerVariantInvocationsPerInstance` per variant that asks for autoscaling; optional data capture.
    - serverless: no VPC, no network isolation, no data capture (SageMaker does not offer them there).
    - async: like real-time, plus S3 output/failure prefixes in `data_bucket` (KMS), SNS success/error topics
      (KMS, TLS-only publish) and backlog-based autoscaling that may go to zero, with a step-scaling policy on
      `HasBacklogWithoutCapacity` to scale out of zero on the first queued request.

    When every variant is autoscaled, updates keep the live instance counts (`RetainAllVariantProperties`,
    weights excluded) instead of restarting at `instance_count`.

    Known limit (domain.md P12): changing the instance type of an autoscaled variant, or removing it, fails in
    UpdateEndpoint while the scalable target is registered; deploy once with autoscaling removed, then with
    the new type.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: EndpointSpec,
        image: ServingImage,
        artifact_bucket: s3.IBucket,
        artifact_key: str,
        key: kms.IKey,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        data_bucket: s3.IBucket | None = None,
        environment: Mapping[str, str] | None = None,
        alarm_topic: sns.ITopic | None = None,
        network_isolation: bool = True,
        weights_gib: float = 0.0,
        artifact_uncompressed: bool = False,
        ami_versions: Mapping[str, str | None] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        self.weights_gib = weights_gib
        self.ami_versions = dict(ami_versions or {})
        self.key = key
        self.data_bucket = data_bucket
        if self._needs_data_bucket and data_bucket is None:
            raise ValueError(f"endpoint {spec.name!r} writes data capture or async results: pass data_bucket")
        in_vpc = not isinstance(spec, ServerlessEndpointConfig)

        self.role = iam.Role(
            self,
            "ExecutionRole",
            # Only SageMaker acting for this account (confused-deputy protection, IAM guide).
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": Stack.of(scope).account}}
            ),
            description=f"SageMaker execution role of endpoint {spec.name}: this model's artifact and image only",
        )
        self._grant_model_access(image, artifact_bucket, artifact_key, uncompressed=artifact_uncompressed)

        self._connections: ec2.Connections | None = None
        vpc_config = None
        if in_vpc:
            security_group = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=vpc,
                description=f"SageMaker endpoint {spec.name}: HTTPS out to S3/ECR/CloudWatch, nothing in",
                allow_all_outbound=False,
            )
            security_group.add_egress_rule(
                ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to S3, ECR and CloudWatch via endpoints or NAT"
            )
            self._connections = ec2.Connections(security_groups=[security_group], default_port=ec2.Port.tcp(443))
            vpc_config = sagemaker.CfnModel.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id], subnets=[s.subnet_id for s in subnets]
            )
            self._grant_vpc_access(subnets, security_group)

        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=in_vpc and network_isolation,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image.uri,
                model_data_url=None if artifact_uncompressed else artifact_bucket.s3_url_for_object(artifact_key),
                # Model files as they are under a prefix: SageMaker copies them without unpacking an archive.
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=artifact_bucket.s3_url_for_object(artifact_key),
                        s3_data_type="S3Prefix",
                        compression_type="None",
                    )
                )
                if artifact_uncompressed
                else None,
                environment=dict(environment) if environment else None,
            ),
            vpc_config=vpc_config,
        )
        # SageMaker checks image and artifact access in CreateModel: the role's *policy* must exist first.
        self.model.node.add_dependency(self.role)
        if not in_vpc:
            skip_checkov(
                self.model,
                {
                    "CKV_AWS_370": "Serverless Inference supports neither network isolation nor a VPC (SageMaker "
                    "Developer Guide, Serverless Inference, feature exclusions); models of the other endpoint "
                    "kinds set EnableNetworkIsolation",
                },
            )

        self.variants = self._variants()
        self.topics: list[sns.ITopic] = []
        self.config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=self._production_variants(),
            kms_key_id=key.key_arn if self._uses_volume_key else None,
            data_capture_config=self._data_capture(),
            async_inference_config=self._async_config(),
        )
        retain = self._retains_instance_counts
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_config_name=self.config.attr_endpoint_config_name,
            # An update (new model, new config) would otherwise restart every variant at InitialInstanceCount,
            # dropping a scaled-out fleet back to its initial size under load. Keep the autoscaled instance
            # counts; weight changes in the new config still apply. Only DesiredWeight is excluded: the
            # VariantProperty docs mark DataCaptureConfig "not currently supported" (UpdateEndpoint rejects it).
            retain_all_variant_properties=True if retain else None,
            exclude_retained_variant_properties=[
                sagemaker.CfnEndpoint.VariantPropertyProperty(variant_property_type=kind) for kind in ("DesiredWeight",)
            ]
            if retain
            else None,
        )
        self._autoscaling()
        self.alarms = endpoint_alarms(self, alarm_topic)

    # ----- public API

    @property
    def connections(self) -> ec2.Connections:
        """The endpoint ENIs' security group. A property: jsii reads it from the JS side."""
        if self._connections is None:
            raise ValueError(f"serverless endpoint {self.spec.name!r} has no ENIs in the VPC, so no connections")
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        """The execution role, so that `bucket.grant_read(endpoint)` gives the model more data."""
        return self.role

    @property
    def endpoint_name(self) -> str:
        return self.endpoint.attr_endpoint_name

    @property
    def endpoint_arn(self) -> str:
        return self.endpoint.ref  # Ref of AWS::SageMaker::Endpoint is its ARN

    @property
    def variant_names(self) -> list[str]:
        """Production variants (a serverless endpoint has one, `AllTraffic`)."""
        return [v.name for v in self.variants] if self.variants else [_SERVERLESS_VARIANT]

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` invoke this endpoint; for async also upload requests and read results and failures."""
        if not isinstance(self.spec, AsyncEndpointConfig):
            return iam.Grant.add_to_principal(grantee=grantee, actions=_INVOKE, resource_arns=[self.endpoint_arn])
        assert self.data_bucket is not None
        bucket, spec = self.data_bucket, self.spec
        grants = [
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["sagemaker:InvokeEndpointAsync"],
                resource_arns=[self.endpoint_arn],
            ),
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:PutObject"],
                resource_arns=[bucket.arn_for_objects(f"{spec.input_path}/*")],
            ),
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:GetObject"],
                resource_arns=[
                    bucket.arn_for_objects(f"{spec.output_path}/*"),
                    bucket.arn_for_objects(f"{spec.failure_prefix}/*"),
                ],
            ),
            iam.Grant.add_to_principal(
                grantee=grantee, actions=["kms:Decrypt", "kms:GenerateDataKey"], resource_arns=[self.key.key_arn]
            ),
        ]
        return functools.reduce(lambda a, b: a.combine(b), grants)

    def metric(
        self,
        metric_name: str,
        *,
        variant: str | None = None,
        statistic: str = "Average",
        period: Duration = _ONE_MINUTE,
    ) -> cloudwatch.Metric:
        """An `AWS/SageMaker` metric of one variant (default: the first)."""
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name, "VariantName": variant or self.variant_names[0]},
            statistic=statistic,
            period=period,
        )

    def metric_model_latency(self, *, variant: str | None = None) -> cloudwatch.Metric:
        """p99 time the model container takes to answer, in microseconds."""
        return self.metric("ModelLatency", variant=variant, statistic="p99")

    def metric_invocations(self, *, variant: str | None = None) -> cloudwatch.Metric:
        return self.metric("Invocations", variant=variant, statistic="Sum")

    def metric_invocation_5xx_errors(self, *, variant: str | None = None) -> cloudwatch.Metric:
        return self.metric("Invocation5XXErrors", variant=variant, statistic="Sum")

    def metric_invocation_4xx_errors(self, *, variant: str | None = None) -> cloudwatch.Metric:
        return self.metric("Invocation4XXErrors", variant=variant, statistic="Sum")

    def metric_approximate_backlog_size_per_instance(self) -> cloudwatch.Metric:
        """Async only: queued requests per instance (the autoscaling target metric)."""
        return self.endpoint_metric("ApproximateBacklogSizePerInstance")

    def metric_has_backlog_without_capacity(self) -> cloudwatch.Metric:
        """Async only: 1 while requests wait and no instance runs (the scale-out-from-zero signal)."""
        return self.endpoint_metric("HasBacklogWithoutCapacity")

    # ----- construction

    @property
    def _needs_data_bucket(self) -> bool:
        return isinstance(self.spec, AsyncEndpointConfig) or self._capture is not None

    @property
    def _capture(self) -> DataCaptureConfig | None:
        return None if isinstance(self.spec, ServerlessEndpointConfig) else self.spec.data_capture

    @property
    def _retains_instance_counts(self) -> bool:
        """Every variant is autoscaled: its live instance count, not InitialInstanceCount, survives an update.
        Not with a fixed-size variant (RetainAllVariantProperties would then ignore a changed instance_count),
        nor for an async endpoint that may sit at zero: an update then starts it at instance_count, the
        documented path, and it scales back to zero."""
        if isinstance(self.spec, RealtimeEndpointConfig):
            return all(v.autoscaling is not None for v in self.spec.variants)
        scaling = self.spec.autoscaling if isinstance(self.spec, AsyncEndpointConfig) else None
        return scaling is not None and not scaling.scales_to_zero

    @property
    def _uses_volume_key(self) -> bool:
        return not isinstance(self.spec, ServerlessEndpointConfig) and self.spec.uses_volume_key

    def _variants(self) -> list[VariantConfig]:
        if isinstance(self.spec, RealtimeEndpointConfig):
            return list(self.spec.variants)
        if isinstance(self.spec, AsyncEndpointConfig):
            return [self.spec.variant]
        return []

    def _production_variants(self) -> list[sagemaker.CfnEndpointConfig.ProductionVariantProperty]:
        spec = self.spec
        if isinstance(spec, ServerlessEndpointConfig):
            return [
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=_SERVERLESS_VARIANT,
                    model_name=self.model.attr_model_name,
                    serverless_config=sagemaker.CfnEndpointConfig.ServerlessConfigProperty(
                        memory_size_in_mb=spec.memory_mb,
                        max_concurrency=spec.max_concurrency,
                        provisioned_concurrency=spec.provisioned_concurrency,
                    ),
                )
            ]
        return [self._variant(variant) for variant in self.variants]

    def _variant(self, variant: VariantConfig) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
        # Start-up limits sized from the weights (`weights_gib`) unless the blueprint sets them.
        limits = startup_limits(
            self.weights_gib,
            variant.instance_type,
            startup_timeout_seconds=variant.startup_timeout_seconds,
            download_timeout_seconds=variant.download_timeout_seconds,
            volume_size_gb=variant.volume_size_gb,
        )
        return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=variant.name,
            model_name=self.model.attr_model_name,
            instance_type=variant.instance_type,
            initial_instance_count=variant.instance_count,
            initial_variant_weight=variant.weight,
            inference_ami_version=self.ami_versions.get(variant.name, variant.ami_version),
            container_startup_health_check_timeout_in_seconds=limits.startup_timeout_seconds,
            model_data_download_timeout_in_seconds=limits.download_timeout_seconds,
            volume_size_in_gb=limits.volume_size_gb,
        )

    def _grant_model_access(
        self, image: ServingImage, bucket: s3.IBucket, artifact_key: str, *, uncompressed: bool
    ) -> None:
        # One object (or one prefix), not grant_read: that would add s3:GetBucket*/List* on the whole bucket.
        objects = bucket.arn_for_objects(f"{artifact_key}*" if uncompressed else artifact_key)
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        if uncompressed:
            # SageMaker lists the prefix to find the files it copies.
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{artifact_key}*"]}},
                )
            )
            _acknowledge(
                self.role,
                {
                    f"AwsSolutions-IAM5[Resource::{_nag(Stack.of(self), objects)}]": (
                        "SageMaker reads every model file under the uncompressed artifact's prefix (ModelDataSource "
                        "S3Prefix), and only those"
                    )
                },
            )
        if bucket.encryption_key is not None:
            bucket.encryption_key.grant_decrypt(self.role)
        image.grant_pull(self.role)
        stack = Stack.of(self)
        log_groups = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name="/aws/sagemaker/Endpoints/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                resources=[log_groups],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/Endpoints*", "AWS/SageMaker"]}},
            )
        )
        _acknowledge(
            self.role,
            {
                "AwsSolutions-IAM5[Resource::*]": (
                    "ecr:GetAuthorizationToken has no resource-level permissions; cloudwatch:PutMetricData has none "
                    "either and is limited to the SageMaker endpoint namespaces by a cloudwatch:namespace condition"
                ),
                f"AwsSolutions-IAM5[Resource::{_nag(stack, log_groups)}]": (
                    "SageMaker names the endpoint's log group /aws/sagemaker/Endpoints/<endpoint-name>; the name is "
                    "generated by CloudFormation after this role exists, so the role is scoped to that prefix"
                ),
            },
        )

    def _grant_vpc_access(self, subnets: Sequence[ec2.ISubnet], security_group: ec2.ISecurityGroup) -> None:
        # The CreateModel execution-role permissions for VpcConfig (SageMaker creates the ENIs as this role).
        stack = Stack.of(self)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeVpcs",
                ],
                resources=["*"],
            )
        )
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                ],
                resources=[
                    interfaces,
                    *(stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id) for s in subnets),
                    stack.format_arn(
                        service="ec2", resource="security-group", resource_name=security_group.security_group_id
                    ),
                ],
            )
        )
        _acknowledge(
            self.role,
            {
                f"AwsSolutions-IAM5[Resource::{_nag(stack, interfaces)}]": (
                    "SageMaker creates the endpoint ENIs as this role; their IDs do not exist before creation. "
                    "Subnets and the security group are listed explicitly in the same statement"
                ),
            },
        )

    def _data_capture(self) -> sagemaker.CfnEndpointConfig.DataCaptureConfigProperty | None:
        capture = self._capture
        if capture is None:
            return None
        assert self.data_bucket is not None
        self._grant_write(capture.prefix)
        return sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=capture.sampling_percent,
            destination_s3_uri=self.data_bucket.s3_url_for_object(capture.prefix),
            kms_key_id=self.key.key_arn,
            capture_options=[
                sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode=m)
                for m in (["Input", "Output"] if capture.mode == "InputAndOutput" else [capture.mode])
            ],
            capture_content_type_header=sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                json_content_types=["application/json"], csv_content_types=["text/csv"]
            ),
        )

    def _async_config(self) -> sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty | None:
        spec = self.spec
        if not isinstance(spec, AsyncEndpointConfig):
            return None
        assert self.data_bucket is not None and spec.output_path is not None
        bucket = self.data_bucket
        self._grant_write(spec.output_path)
        self._grant_write(spec.failure_prefix)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{spec.input_path}/*")])
        )
        self._acknowledge_prefix(spec.input_path, "reads the request payloads callers upload under this prefix")
        notification = None
        if spec.notifications:
            success = sns.Topic(self, "SuccessTopic", master_key=self.key, enforce_ssl=True)
            error = sns.Topic(self, "ErrorTopic", master_key=self.key, enforce_ssl=True)
            self.topics = [success, error]
            # sns:Publish on these two topics; the key permissions SNS needs are granted with the S3 prefixes
            # (grant_publish would add kms:GenerateDataKey*).
            iam.Grant.add_to_principal(
                grantee=self.role, actions=["sns:Publish"], resource_arns=[t.topic_arn for t in self.topics]
            )
            notification = sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
                success_topic=success.topic_arn,
                error_topic=error.topic_arn,
                include_inference_response_in=["SUCCESS_NOTIFICATION_TOPIC", "ERROR_NOTIFICATION_TOPIC"],
            )
        client = None
        if spec.max_concurrent_invocations_per_instance is not None:
            client = sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                max_concurrent_invocations_per_instance=spec.max_concurrent_invocations_per_instance
            )
        return sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
            output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                s3_output_path=bucket.s3_url_for_object(spec.output_path),
                s3_failure_path=bucket.s3_url_for_object(spec.failure_prefix),
                kms_key_id=self.key.key_arn,
                notification_config=notification,
            ),
            client_config=client,
        )

    def _grant_write(self, prefix: str) -> None:
        assert self.data_bucket is not None
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[self.data_bucket.arn_for_objects(f"{prefix}/*")])
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self.key.key_arn])
        )
        self._acknowledge_prefix(prefix, "writes objects whose keys SageMaker generates under this prefix")

    def _acknowledge_prefix(self, prefix: str, why: str) -> None:
        assert self.data_bucket is not None
        stack = Stack.of(self)
        arn = self.data_bucket.arn_for_objects(f"{prefix}/*")
        _acknowledge(self.role, {f"AwsSolutions-IAM5[Resource::{_nag(stack, arn)}]": f"SageMaker {why}"})

    def _autoscaling(self) -> None:
        stack = Stack.of(self)
        # Application Auto Scaling's service-linked role for SageMaker (created on first registration): the L2
        # would otherwise create a role of its own that the service does not need.
        role = iam.Role.from_role_arn(
            self,
            "AutoScalingRole",
            stack.format_arn(
                service="iam",
                region="",
                resource="role",
                resource_name="aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
                "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
            ),
            mutable=False,
        )
        if isinstance(self.spec, RealtimeEndpointConfig):
            self._realtime_scaling(self.spec, role)
        elif isinstance(self.spec, AsyncEndpointConfig) and self.spec.autoscaling is not None:
            self._async_scaling(self.spec.autoscaling, role)

    def _realtime_scaling(self, spec: RealtimeEndpointConfig, role: iam.IRole) -> None:
        for variant in spec.variants:
            if variant.autoscaling is None:
                continue
            scaling = variant.autoscaling
            target = self._scalable_target(
                f"{variant.name}Scaling", variant.name, role, scaling.min_instances, scaling.max_instances
            )
            concurrent = scaling.metric == "concurrent_requests"
            target.scale_to_track_metric(
                "ConcurrentRequestsPerModel" if concurrent else "InvocationsPerInstance",
                target_value=scaling.target_value,
                predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION
                if concurrent
                else appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
                scale_in_cooldown=Duration.seconds(scaling.scale_in_cooldown_seconds),
                scale_out_cooldown=Duration.seconds(scaling.scale_out_cooldown_seconds),
            )

    def _async_scaling(self, scaling: AsyncScalingConfig, role: iam.IRole) -> None:
        target = self._scalable_target(
            "Scaling", self.variant_names[0], role, scaling.min_instances, scaling.max_instances
        )
        target.scale_to_track_metric(
            "BacklogPerInstance",
            target_value=scaling.target_backlog_per_instance,
            custom_metric=self.metric_approximate_backlog_size_per_instance(),
            scale_in_cooldown=Duration.seconds(scaling.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(scaling.scale_out_cooldown_seconds),
        )
        if scaling.scales_to_zero:
            # Target tracking alone leaves the variant at zero until the backlog exceeds the target;
            # this step policy adds the first instance as soon as a request waits with no capacity.
            target.scale_on_metric(
                "ScaleOutFromZero",
                metric=self.metric_has_backlog_without_capacity(),
                scaling_steps=[
                    appscaling.ScalingInterval(upper=0.5, change=0),
                    appscaling.ScalingInterval(lower=0.5, change=1),
                ],
                adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
                # No shorter than a cold start: until the first instance answers, the backlog still has no capacity.
                cooldown=Duration.seconds(max(scaling.scale_out_cooldown_seconds, scaling.cold_start_seconds)),
                evaluation_periods=1,
                metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            )

    def _scalable_target(
        self, construct_id: str, variant: str, role: iam.IRole, min_capacity: int, max_capacity: int
    ) -> appscaling.ScalableTarget:
        return appscaling.ScalableTarget(
            self,
            construct_id,
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{self.endpoint_name}/variant/{variant}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=min_capacity,
            max_capacity=max_capacity,
            role=role,
        )

    def endpoint_metric(self, metric_name: str, *, statistic: str = "Average") -> cloudwatch.Metric:
        """An `AWS/SageMaker` metric with the EndpointName dimension only (the async backlog metrics)."""
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name},
            statistic=statistic,
            period=_ONE_MINUTE,
        )
