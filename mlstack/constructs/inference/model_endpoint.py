"""`ModelEndpoint`: one SageMaker model served by a real-time, serverless or async endpoint (an L3 over the L1s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jsii
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from mlstack.constructs.inference.alarms import endpoint_alarms
from mlstack.constructs.inference.endpoint_parts import EndpointParts
from mlstack.constructs.inference.image import ServingImage
from mlstack.constructs.inference.permissions import grant_model_access, grant_vpc_access
from mlstack.constructs.inference.props import AlarmThresholds, CaptureMode
from mlstack.constructs.inference.serving import SERVERLESS_VARIANT, AsyncServing, RealtimeServing, ServerlessServing
from mlstack.constructs.scanners import skip_checkov
from mlstack.constructs.security.groups import closed_security_group


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class ModelEndpoint(EndpointParts):
    """A SageMaker model and the endpoint that serves it, in the mode `serving` describes.

    Defines an execution role that may read exactly the model artifact, pull exactly the serving image, write
    its logs and (per mode) write data capture / async results under their prefixes and publish to its topics;
    the Model / EndpointConfig / Endpoint trio with physical names left to CloudFormation (a replacement never
    clashes on a name); CloudWatch alarms that notify `alarm_topic` (unless `alarms=None`).

    - `RealtimeServing`: network-isolated model (unless `network_isolation=False`) in `subnets` behind a security
      group that only allows HTTPS out; weighted variants; EBS volumes encrypted with `key` (unless
      `volume_kms_key=False`, for hosts with local NVMe); target tracking per variant that has `scaling`.
    - `ServerlessServing`: no VPC, no network isolation, no data capture (SageMaker does not offer them there).
    - `AsyncServing`: like real-time, plus S3 output/failure prefixes in `data_bucket` (KMS), SNS success/error
      topics and backlog-based scaling that may go to zero, with a step policy to scale out of zero.

    When every variant is autoscaled, updates keep the live instance counts (`RetainAllVariantProperties`,
    weights excluded) instead of restarting at `instance_count`.

    Known limit: changing the instance type of an autoscaled variant, or removing it, fails in UpdateEndpoint
    while the scalable target is registered; deploy once with scaling removed, then with the new type.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        serving: RealtimeServing | ServerlessServing | AsyncServing,
        image: ServingImage,
        artifact_bucket: s3.IBucket,
        artifact_key: str,
        key: kms.IKey,
        vpc: ec2.IVpc | None = None,
        subnets: Sequence[ec2.ISubnet] | None = None,
        name: str | None = None,
        data_bucket: s3.IBucket | None = None,
        environment: Mapping[str, str] | None = None,
        network_isolation: bool = True,
        artifact_uncompressed: bool = False,
        alarms: AlarmThresholds | None = AlarmThresholds(),  # noqa: B008 - frozen
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        """
        :param serving: the mode and its settings (`RealtimeServing`, `ServerlessServing`, `AsyncServing`).
        :param image: the serving image (`ServingImage.from_registry` / `from_repository`).
        :param artifact_bucket: the bucket holding the model artifact; the role may read `artifact_key` only.
        :param artifact_key: `model.tar.gz` object key, or with `artifact_uncompressed` a prefix ending in `/`.
        :param key: KMS key for EBS volumes, data capture, async results and topics.
        :param vpc: required for real-time and async (the hosts' ENIs); ignored by serverless.
        :param subnets: private subnets of `vpc`. Default: `vpc.private_subnets`.
        :param name: short name in descriptions and alarm texts. Default: `construct_id` in lower case.
        :param data_bucket: required for data capture and async (results, failures, requests).
        :param environment: container environment. Default: none. No secrets: it is in the template.
        :param network_isolation: run the container with no network (real-time and async). Default: True.
        :param artifact_uncompressed: `artifact_key` is a prefix of model files copied as they are. Default: False.
        :param alarms: alarm thresholds; None for no alarms. Default: `AlarmThresholds()`.
        :param alarm_topic: SNS topic every alarm notifies. Default: none (alarms without actions).
        """
        super().__init__(scope, construct_id)
        self.serving = serving
        self.name = name or construct_id.lower()
        self.key = key
        self.data_bucket = data_bucket
        mode = serving.mode
        if (mode.name == "async" or serving.data_capture is not None) and data_bucket is None:
            raise ValueError(f"endpoint {self.name!r} writes data capture or async results: pass data_bucket")
        if mode.in_vpc and vpc is None:
            raise ValueError(f"{mode.name} endpoint {self.name!r} runs hosts in a VPC: pass vpc")

        self.role = iam.Role(
            self,
            "ExecutionRole",
            # Only SageMaker acting for this account (confused-deputy protection, IAM guide).
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": Stack.of(scope).account}}
            ),
            description=f"SageMaker execution role of endpoint {self.name}: this model's artifact and image only",
        )
        grant_model_access(self, self.role, image, artifact_bucket, artifact_key, uncompressed=artifact_uncompressed)

        self._connections: ec2.Connections | None = None
        vpc_config = None
        if mode.in_vpc and vpc is not None:
            chosen = list(subnets) if subnets is not None else vpc.private_subnets
            security_group = closed_security_group(
                self,
                "SecurityGroup",
                vpc=vpc,
                description=f"SageMaker endpoint {self.name}: HTTPS out to S3/ECR/CloudWatch, nothing in",
            )
            security_group.add_egress_rule(
                ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to S3, ECR and CloudWatch via endpoints or NAT"
            )
            self._connections = ec2.Connections(security_groups=[security_group], default_port=ec2.Port.tcp(443))
            vpc_config = sagemaker.CfnModel.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id], subnets=[s.subnet_id for s in chosen]
            )
            grant_vpc_access(self, self.role, chosen, security_group)

        artifact_url = artifact_bucket.s3_url_for_object(artifact_key)
        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=mode.in_vpc and network_isolation,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image.uri,
                model_data_url=None if artifact_uncompressed else artifact_url,
                # Model files as they are under a prefix: SageMaker copies them without unpacking an archive.
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=artifact_url, s3_data_type="S3Prefix", compression_type="None"
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
        if not mode.in_vpc:
            skip_checkov(
                self.model,
                {
                    "CKV_AWS_370": "Serverless Inference supports neither network isolation nor a VPC (SageMaker "
                    "Developer Guide, Serverless Inference, feature exclusions); models of the other endpoint "
                    "kinds set EnableNetworkIsolation",
                },
            )

        variants = serving.production_variants(self)
        capture = self._data_capture()
        async_config, self.topics = serving.async_config(self)
        self.config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=variants,
            kms_key_id=key.key_arn if serving.volume_kms_key else None,
            data_capture_config=capture,
            async_inference_config=async_config,
        )
        retain = serving.retains_instance_counts
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
        serving.add_scaling(self, self._autoscaling_role())
        self.alarms = (
            endpoint_alarms(self, self.name, alarms, alarm_topic, serving.alarm_rules(self, self.name, alarms))
            if alarms is not None
            else []
        )

    # ----- public API

    @property
    def connections(self) -> ec2.Connections:
        """The endpoint ENIs' security group. A property: jsii reads it from the JS side."""
        if self._connections is None:
            raise ValueError(f"serverless endpoint {self.name!r} has no ENIs in the VPC, so no connections")
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        """The execution role, so that `bucket.grant_read(endpoint)` gives the model more data."""
        return self.role

    @property
    def variant_names(self) -> list[str]:
        """Production variants (a serverless endpoint has one, `AllTraffic`)."""
        return [v.name for v in self.serving.variants] or [SERVERLESS_VARIANT]

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` invoke this endpoint; for async also upload requests and read results and failures."""
        return self.serving.grant_invoke(self, grantee)

    # ----- construction

    def _autoscaling_role(self) -> iam.IRole:
        # Application Auto Scaling's service-linked role for SageMaker (created on first registration): the L2
        # would otherwise create a role of its own that the service does not need.
        return iam.Role.from_role_arn(
            self,
            "AutoScalingRole",
            Stack.of(self).format_arn(
                service="iam",
                region="",
                resource="role",
                resource_name="aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
                "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
            ),
            mutable=False,
        )

    def _data_capture(self) -> sagemaker.CfnEndpointConfig.DataCaptureConfigProperty | None:
        capture = self.serving.data_capture
        if capture is None:
            return None
        bucket = self.require_data_bucket()
        self.grant_write(capture.prefix)
        modes = (
            [CaptureMode.INPUT, CaptureMode.OUTPUT] if capture.mode is CaptureMode.INPUT_AND_OUTPUT else [capture.mode]
        )
        return sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=capture.sampling_percent,
            destination_s3_uri=bucket.s3_url_for_object(capture.prefix),
            kms_key_id=self.key.key_arn,
            capture_options=[sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode=m.value) for m in modes],
            capture_content_type_header=sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                json_content_types=["application/json"], csv_content_types=["text/csv"]
            ),
        )
