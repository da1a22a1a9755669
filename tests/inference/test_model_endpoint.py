"""ModelEndpoint and InvokeApi: per mode the variant/config shape, autoscaling, data capture, IAM scope, isolation."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from mlstack import blueprint
from mlstack.config import BlueprintConfig
from mlstack.stacks.inference import InferenceStack
from mlstack.synth_all import cdk_json_context
from tests.synth import TEST_CONTEXT

MODEL = {
    "artifact": {"key": "m/model.tar.gz"},
    "image": {"source": "ecr", "repository": "serving/ovms", "tag": "v1"},
    "parameters_billion": 1,
}
ENDPOINTS: list[dict[str, Any]] = [
    {
        "name": "gpu",
        "mode": "realtime",
        "variants": [
            {
                "name": "blue",
                "instance_type": "ml.g5.2xlarge",
                "weight": 3,
                "autoscaling": {
                    "min_instances": 1,
                    "max_instances": 4,
                    "target_invocations_per_instance": 70,
                    "scale_in_cooldown_seconds": 400,
                    "scale_out_cooldown_seconds": 30,
                },
            },
            {"name": "green", "instance_type": "ml.g6.xlarge", "weight": 1},
        ],
        "data_capture": {"sampling_percent": 25, "prefix": "capture/gpu"},
    },
    {"name": "cpu", "mode": "realtime", "variants": [{"instance_type": "ml.c7i.8xlarge", "instance_count": 2}]},
    {
        "name": "neuron",
        "mode": "realtime",
        "variants": [
            {
                "instance_type": "ml.inf2.xlarge",
                "autoscaling": {"min_instances": 1, "max_instances": 2, "target_invocations_per_instance": 100},
            }
        ],
    },
    {"name": "tiny", "mode": "serverless", "memory_mb": 2048, "max_concurrency": 10, "provisioned_concurrency": 2},
    {
        "name": "batch",
        "mode": "async",
        "instance_type": "ml.c7g.xlarge",
        "output_path": "out",
        "max_concurrent_invocations_per_instance": 3,
        "autoscaling": {"min_instances": 0, "max_instances": 3, "target_backlog_per_instance": 2},
    },
]


LLM_MODEL = {
    "artifact": {"key": "llama-3-8b/", "uncompressed": True},
    "image": {
        "source": "dlc",
        "repository": "huggingface-pytorch-tgi-inference",
        "tag": "2.4.0-tgi2.3.1-gpu-py311-cu124-ubuntu22.04",
    },
    "parameters_billion": 8,
}
LLM_ENDPOINT = {
    "name": "chat",
    "mode": "realtime",
    "variants": [
        {
            "instance_type": "ml.g5.2xlarge",
            "autoscaling": {
                "min_instances": 1,
                "max_instances": 3,
                "metric": "concurrent_requests",
                "target_concurrent_requests_per_model": 4,
            },
        }
    ],
}
"""An uncompressed 8B LLM in a CUDA 12.4 DLC, scaled on concurrent requests."""


def _config(name: str, **inference: Any) -> BlueprintConfig:
    return BlueprintConfig.model_validate(
        {
            "name": name,
            "description": "test",
            "network": {"availability_zone_ids": ["use1-az4", "use1-az6"]},
            "inference": {"model": MODEL, "endpoints": ENDPOINTS, **inference},
        }
    )


class Built:
    def __init__(self, stack: InferenceStack, caller: iam.Role, client: ec2.SecurityGroup) -> None:
        self.stack, self.caller, self.client = stack, caller, client
        self.grants: list[iam.Grant] = []

    @functools.cached_property
    def template(self) -> Template:
        return Template.from_stack(self.stack)  # the first call synthesizes the whole App

    @functools.cached_property
    def json(self) -> dict[str, Any]:
        return dict(self.template.to_json())

    def resolve(self, value: Any) -> Any:
        return self.stack.resolve(value)

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}

    def one(self, kind: str, prefix: str) -> dict[str, Any]:
        found = [v for k, v in self.resources(kind).items() if k.startswith(prefix)]
        assert len(found) == 1, (kind, prefix, list(self.resources(kind)))
        return found[0]

    def policy_statements(self, role_prefix: str) -> list[dict[str, Any]]:
        statements: list[dict[str, Any]] = []
        for policy in self.resources("AWS::IAM::Policy").values():
            if any(r.get("Ref", "").startswith(role_prefix) for r in policy["Properties"]["Roles"]):
                statements += policy["Properties"]["PolicyDocument"]["Statement"]
        return statements


_CALLER = "arn:aws:iam::111111111111:role/app"
_EXISTING_KEY = "arn:aws:kms:us-east-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """One small App: every mode in one InferenceStack (plus a caller role and a client security group), and a
    second blueprint whose artifact sits in an existing bucket. Both are built before the one synth."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("inference")), context={**cdk_json_context(), **TEST_CONTEXT})
    result = blueprint.build(
        cdk.Stage(app, "unit"),
        _config("unit", invoke_api={"endpoint": "tiny", "callers": [_CALLER]}, alarm_emails=["oncall@example.com"]),
    )
    stack = result.inference
    assert stack is not None
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    grants = [stack.endpoints["gpu"].grant_invoke(caller), stack.endpoints["batch"].grant_invoke(caller)]
    client = ec2.SecurityGroup(stack, "Client", vpc=result.network.vpc, allow_all_outbound=False)
    client.connections.allow_to(stack.endpoints["cpu"], ec2.Port.tcp(443), "client to endpoint")
    # A grant *to* the endpoint makes jsii read endpoint.grant_principal from the JS side.
    sns.Topic(stack, "Feedback").grant_publish(stack.endpoints["cpu"])

    existing_model = {
        **MODEL,
        "artifact": {
            "key": "team/m.tar.gz",
            "existing_bucket": "team-models",
            "existing_bucket_key_arn": _EXISTING_KEY,
        },
        "network_isolation": False,
        "environment": {"HF_MODEL_ID": "org/model"},
    }
    existing_config = BlueprintConfig.model_validate(
        {
            "name": "existing",
            "description": "test",
            "network": {"availability_zone_ids": ["use1-az4", "use1-az6"]},
            "inference": {"model": existing_model, "endpoints": [ENDPOINTS[1]]},
        }
    )
    other = blueprint.build(cdk.Stage(app, "existing"), existing_config).inference
    assert other is not None
    llm_config = BlueprintConfig.model_validate(
        {
            "name": "llm",
            "description": "test",
            "network": {"availability_zone_ids": ["use1-az4", "use1-az6"]},
            "inference": {"model": LLM_MODEL, "endpoints": [LLM_ENDPOINT]},
        }
    )
    llm = blueprint.build(cdk.Stage(app, "llm"), llm_config).inference
    assert llm is not None
    unit = Built(stack, caller, client)
    unit.grants = grants
    return {"unit": unit, "existing": Built(other, caller, client), "llm": Built(llm, caller, client)}


@pytest.fixture(scope="module")
def built(stages: dict[str, Built]) -> Built:
    return stages["unit"]


# ----- every mode


@pytest.mark.parametrize(
    ("kind", "name_property"),
    [
        ("AWS::SageMaker::Model", "ModelName"),
        ("AWS::SageMaker::EndpointConfig", "EndpointConfigName"),
        ("AWS::SageMaker::Endpoint", "EndpointName"),
    ],
)
def test_physical_names_are_left_to_cloudformation(built: Built, kind: str, name_property: str) -> None:
    # A fixed name would make the replacement most endpoint-config changes need fail on "already exists".
    resources = built.resources(kind)
    assert len(resources) == 5
    assert [r for r in resources.values() if name_property in r["Properties"]] == []


def test_model_waits_for_its_role_policy(built: Built) -> None:
    for logical_id, model in built.resources("AWS::SageMaker::Model").items():
        prefix = logical_id.removesuffix(logical_id[-8:]).removesuffix("Model")
        assert any(d.startswith(f"{prefix}ExecutionRoleDefaultPolicy") for d in model["DependsOn"]), logical_id


def test_no_managed_policies_and_no_full_access(built: Built) -> None:
    for role in built.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]
    assert "FullAccess" not in json.dumps(built.json)


# The statements that need Resource "*": actions without resource-level permissions (IAM service reference).
_STAR_ACTIONS = {
    "ecr:GetAuthorizationToken",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "cloudwatch:PutMetricData",
}


def test_execution_roles_use_resource_star_only_where_iam_has_no_resource_level_permissions(built: Built) -> None:
    for prefix in ("Gpu", "Cpu", "Neuron", "Tiny", "Batch"):
        statements = built.policy_statements(f"{prefix}ExecutionRole")
        assert statements, prefix
        for statement in statements:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if statement["Resource"] == "*":
                assert set(actions) <= _STAR_ACTIONS, (prefix, actions)
            assert not any(a.endswith("*") for a in actions), (prefix, actions)
        put_metric = [s for s in statements if s["Action"] == "cloudwatch:PutMetricData"]
        assert put_metric[0]["Condition"]["StringLike"]["cloudwatch:namespace"]


def test_execution_role_reads_exactly_the_artifact(built: Built) -> None:
    statements = built.policy_statements("GpuExecutionRole")
    reads = [s for s in statements if s["Action"] == "s3:GetObject"]
    model_bucket = built.resolve(built.stack.model_bucket.bucket_arn)
    assert reads == [
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": {"Fn::Join": ["", [model_bucket, "/m/model.tar.gz"]]}}
    ]


def test_execution_role_pulls_only_the_serving_repository(built: Built) -> None:
    pulls = [s for s in built.policy_statements("GpuExecutionRole") if "ecr:BatchGetImage" in s["Action"]]
    assert len(pulls) == 1
    # The DataStack's repository (deployed and pushed to before the endpoint stack), by reference.
    repository = built.stack.data.repository
    assert repository is not None
    assert pulls[0]["Resource"] == built.resolve(repository.repository_arn)
    assert "Fn::GetStackOutput" in json.dumps(pulls[0]["Resource"])
    data = Template.from_stack(built.stack.data).to_json()["Resources"]
    (repo,) = [r["Properties"] for r in data.values() if r["Type"] == "AWS::ECR::Repository"]
    assert repo["RepositoryName"] == "serving/ovms"
    assert (repo["ImageTagMutability"], repo["ImageScanningConfiguration"]) == ("IMMUTABLE", {"ScanOnPush": True})
    assert repo["EncryptionConfiguration"]["EncryptionType"] == "KMS"


def test_alarms_on_latency_and_5xx_per_variant(built: Built) -> None:
    alarms = [a["Properties"] for a in built.resources("AWS::CloudWatch::Alarm").values()]
    gpu = [a for a in alarms if a.get("AlarmDescription", "").startswith("gpu/")]
    assert sorted((a["MetricName"], a["Dimensions"][1]["Value"]) for a in gpu) == [
        ("Invocation5XXErrors", "blue"),
        ("Invocation5XXErrors", "green"),
        ("ModelLatency", "blue"),
        ("ModelLatency", "green"),
    ]
    latency = next(a for a in gpu if a["MetricName"] == "ModelLatency")
    assert latency["ExtendedStatistic"] == "p99"
    assert latency["Threshold"] == 1000 * 1000  # default 1000 ms, in microseconds


def test_every_alarm_notifies_the_stacks_encrypted_alarm_topic(built: Built) -> None:
    alarms = built.resources("AWS::CloudWatch::Alarm")
    (topic_id,) = [k for k in built.resources("AWS::SNS::Topic") if k.startswith("AlarmTopic")]
    # Every alarm has an action: the topic, or (the scale-out-from-zero step alarm) its scaling policy.
    assert alarms and all(a["Properties"]["AlarmActions"] for a in alarms.values())
    watched = [a for k, a in alarms.items() if "ScaleOutFromZero" not in k]
    assert len(watched) == 4 * 2 + 1 * 2 + 6 + 2  # variants x 2, serverless x 2, async x 8
    assert all(a["Properties"]["AlarmActions"] == [{"Ref": topic_id}] for a in watched)
    topic = built.json["Resources"][topic_id]["Properties"]
    assert "KmsMasterKeyId" in topic
    (subscription,) = built.resources("AWS::SNS::Subscription").values()
    assert (subscription["Properties"]["Protocol"], subscription["Properties"]["Endpoint"]) == (
        "email",
        "oncall@example.com",
    )
    (policy,) = [
        p for p in built.resources("AWS::SNS::TopicPolicy").values() if {"Ref": topic_id} in p["Properties"]["Topics"]
    ]
    (publish,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}


def test_async_endpoints_alarm_on_failures_queue_age_and_a_lasting_backlog_without_capacity(built: Built) -> None:
    alarms = [a["Properties"] for a in built.resources("AWS::CloudWatch::Alarm").values()]
    batch = {a["MetricName"]: a for a in alarms if a.get("AlarmDescription", "").startswith("batch")}
    assert set(batch) == {
        "ModelLatency",
        "Invocation5XXErrors",
        "RequestDownloadFailures",
        "InvocationFailures",
        "ResponseUploadFailures",
        "NotificationFailures",
        "ApproximateAgeOfOldestRequest",
        "HasBacklogWithoutCapacity",
    }
    assert batch["ApproximateAgeOfOldestRequest"]["Threshold"] == 3600  # 60 minutes, in seconds
    lasting = batch["HasBacklogWithoutCapacity"]
    assert (lasting["EvaluationPeriods"], lasting["DatapointsToAlarm"], lasting["Statistic"]) == (20, 20, "Maximum")
    assert [d["Name"] for d in lasting["Dimensions"]] == ["EndpointName"]
    assert [d["Name"] for d in batch["ResponseUploadFailures"]["Dimensions"]] == ["EndpointName", "VariantName"]
    # An input outside the prefix the role reads fails there: the caller's first mistake must reach the topic.
    download = batch["RequestDownloadFailures"]
    assert (download["Namespace"], download["Statistic"], download["Threshold"]) == ("AWS/SageMaker", "Sum", 1)
    assert [d["Name"] for d in download["Dimensions"]] == ["EndpointName", "VariantName"]


def test_execution_roles_trust_sagemaker_only_for_this_account(built: Built) -> None:
    roles = [r for k, r in built.resources("AWS::IAM::Role").items() if "ExecutionRole" in k]
    assert len(roles) == 5
    for role in roles:
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
        assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_network_isolation_is_a_setting(stages: dict[str, Built]) -> None:
    (model,) = stages["existing"].resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["EnableNetworkIsolation"] is False


# ----- real-time


def test_realtime_variants_carry_weights_types_and_counts(built: Built) -> None:
    config = built.one("AWS::SageMaker::EndpointConfig", "GpuConfig")["Properties"]
    variants = [
        (v["VariantName"], v["InstanceType"], v["InitialInstanceCount"], v["InitialVariantWeight"])
        for v in config["ProductionVariants"]
    ]
    assert variants == [("blue", "ml.g5.2xlarge", 1, 3), ("green", "ml.g6.xlarge", 1, 1)]


def test_realtime_model_is_network_isolated_in_the_private_subnets(built: Built) -> None:
    model = built.one("AWS::SageMaker::Model", "CpuModel")["Properties"]
    assert model["EnableNetworkIsolation"] is True
    subnets = model["VpcConfig"]["Subnets"]
    assert len(subnets) == 2
    assert all("PrivateSubnet" in json.dumps(s) for s in subnets)
    assert len(model["VpcConfig"]["SecurityGroupIds"]) == 1


def test_endpoint_security_group_allows_only_https_out(built: Built) -> None:
    group = built.one("AWS::EC2::SecurityGroup", "CpuSecurityGroup")["Properties"]
    (egress,) = group["SecurityGroupEgress"]
    assert (egress["CidrIp"], egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == (
        "0.0.0.0/0",
        "tcp",
        443,
        443,
    )
    assert "SecurityGroupIngress" not in group


def test_volume_key_only_where_no_host_has_local_nvme(built: Built) -> None:
    key_arn = built.resolve(built.stack.endpoints["cpu"].key.key_arn)
    assert built.one("AWS::SageMaker::EndpointConfig", "CpuConfig")["Properties"]["KmsKeyId"] == key_arn
    assert built.one("AWS::SageMaker::EndpointConfig", "NeuronConfig")["Properties"]["KmsKeyId"] == key_arn
    # g5 and g6 have local NVMe: SageMaker rejects a KmsKeyId for them.
    assert "KmsKeyId" not in built.one("AWS::SageMaker::EndpointConfig", "GpuConfig")["Properties"]


def test_neuron_hosts_get_the_neuron_ami(built: Built) -> None:
    (variant,) = built.one("AWS::SageMaker::EndpointConfig", "NeuronConfig")["Properties"]["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-neuron-2"
    (cpu,) = built.one("AWS::SageMaker::EndpointConfig", "CpuConfig")["Properties"]["ProductionVariants"]
    assert "InferenceAmiVersion" not in cpu


def test_realtime_autoscaling_tracks_invocations_per_instance(built: Built) -> None:
    target = built.one("AWS::ApplicationAutoScaling::ScalableTarget", "GpublueScaling")["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    endpoint = built.resolve(built.stack.endpoints["gpu"].endpoint_name)
    assert target["ResourceId"] == {"Fn::Join": ["", ["endpoint/", endpoint, "/variant/blue"]]}
    # The service-linked role, not a role of our own.
    assert "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint" in json.dumps(target["RoleARN"])
    policy = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "GpublueScalingInvocations")["Properties"]
    assert policy["TargetTrackingScalingPolicyConfiguration"] == {
        "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
        "ScaleInCooldown": 400,
        "ScaleOutCooldown": 30,
        "TargetValue": 70,
    }
    # Only the variant that asked for autoscaling has a scalable target.
    assert not [k for k in built.resources("AWS::ApplicationAutoScaling::ScalableTarget") if "green" in k]


def test_updates_keep_autoscaled_instance_counts_only_when_every_variant_is_autoscaled(built: Built) -> None:
    # Without RetainAllVariantProperties an update restarts each variant at InitialInstanceCount.
    neuron = built.one("AWS::SageMaker::Endpoint", "NeuronEndpoint")["Properties"]
    assert neuron["RetainAllVariantProperties"] is True
    # Only what the VariantProperty docs support: they mark DataCaptureConfig "not currently supported", and an
    # UpdateEndpoint that names it is rejected.
    assert neuron["ExcludeRetainedVariantProperties"] == [{"VariantPropertyType": "DesiredWeight"}]
    # gpu has a fixed-size variant (green) and cpu no autoscaling: a changed instance_count must still apply;
    # batch may sit at zero instances: an update starts it at instance_count and it scales back down.
    for prefix in ("GpuEndpoint", "CpuEndpoint", "TinyEndpoint", "BatchEndpoint"):
        properties = built.one("AWS::SageMaker::Endpoint", prefix)["Properties"]
        assert "RetainAllVariantProperties" not in properties, prefix
        assert "ExcludeRetainedVariantProperties" not in properties, prefix


def test_data_capture_goes_to_the_data_bucket_with_kms(built: Built) -> None:
    capture = built.one("AWS::SageMaker::EndpointConfig", "GpuConfig")["Properties"]["DataCaptureConfig"]
    bucket = built.resolve(built.stack.data_bucket.bucket_name) if built.stack.data_bucket else None
    assert capture["EnableCapture"] is True
    assert capture["InitialSamplingPercentage"] == 25
    assert capture["DestinationS3Uri"] == {"Fn::Join": ["", ["s3://", bucket, "/capture/gpu"]]}
    assert capture["KmsKeyId"] == built.resolve(built.stack.endpoints["gpu"].key.key_arn)
    assert capture["CaptureOptions"] == [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}]
    writes = [s for s in built.policy_statements("GpuExecutionRole") if s["Action"] == "s3:PutObject"]
    data_bucket = built.resolve(built.stack.data_bucket.bucket_arn) if built.stack.data_bucket else None
    assert writes[0]["Resource"] == {"Fn::Join": ["", [data_bucket, "/capture/gpu/*"]]}


def test_grant_invoke_is_scoped_to_the_endpoint(built: Built) -> None:
    statements = built.policy_statements("Caller")
    invoke = [s for s in statements if isinstance(s["Action"], list) and "sagemaker:InvokeEndpoint" in s["Action"]]
    assert invoke == [
        {
            "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            "Effect": "Allow",
            "Resource": built.resolve(built.stack.endpoints["gpu"].endpoint_arn),
        }
    ]


def test_other_constructs_can_open_connections_to_it(built: Built) -> None:
    # client.connections.allow_to(endpoint) made jsii read endpoint.connections from the JS side.
    group = built.resolve(built.stack.endpoints["cpu"].connections.security_groups[0].security_group_id)
    built.template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {
            "FromPort": 443,
            "ToPort": 443,
            "GroupId": group,
            "SourceSecurityGroupId": built.resolve(built.client.security_group_id),
        },
    )


def test_grant_principal_is_the_execution_role(built: Built) -> None:
    endpoint = built.stack.endpoints["cpu"]
    assert endpoint.grant_principal is endpoint.role


def test_other_constructs_can_grant_to_it(built: Built) -> None:
    # topic.grant_publish(endpoint) in the fixture landed on the execution role's policy.
    (publish,) = [s for s in built.policy_statements("CpuExecutionRole") if s["Action"] == "sns:Publish"]
    assert publish["Resource"]["Ref"].startswith("Feedback")


# ----- serverless


def test_serverless_variant_has_memory_and_concurrency_and_no_instances(built: Built) -> None:
    (variant,) = built.one("AWS::SageMaker::EndpointConfig", "TinyConfig")["Properties"]["ProductionVariants"]
    assert variant["ServerlessConfig"] == {"MaxConcurrency": 10, "MemorySizeInMB": 2048, "ProvisionedConcurrency": 2}
    assert "InstanceType" not in variant and "InitialInstanceCount" not in variant


def test_serverless_model_has_no_vpc_and_no_isolation(built: Built) -> None:
    # SageMaker serverless supports neither VPC config nor network isolation.
    model = built.one("AWS::SageMaker::Model", "TinyModel")["Properties"]
    assert "VpcConfig" not in model
    assert model["EnableNetworkIsolation"] is False
    assert not [k for k in built.resources("AWS::EC2::SecurityGroup") if k.startswith("Tiny")]
    with pytest.raises(ValueError, match="no ENIs"):
        _ = built.stack.endpoints["tiny"].connections


# ----- async


def test_async_config_writes_results_and_failures_with_kms_and_notifies(built: Built) -> None:
    config = built.one("AWS::SageMaker::EndpointConfig", "BatchConfig")["Properties"]["AsyncInferenceConfig"]
    bucket = built.resolve(built.stack.data_bucket.bucket_name) if built.stack.data_bucket else None
    output = config["OutputConfig"]
    assert output["S3OutputPath"] == {"Fn::Join": ["", ["s3://", bucket, "/out"]]}
    assert output["S3FailurePath"] == {"Fn::Join": ["", ["s3://", bucket, "/out-failures"]]}
    assert output["KmsKeyId"] == built.resolve(built.stack.endpoints["batch"].key.key_arn)
    assert set(output["NotificationConfig"]) == {"SuccessTopic", "ErrorTopic", "IncludeInferenceResponseIn"}
    assert config["ClientConfig"] == {"MaxConcurrentInvocationsPerInstance": 3}


def test_async_topics_are_encrypted_and_tls_only(built: Built) -> None:
    topics = {k: v for k, v in built.resources("AWS::SNS::Topic").items() if k.startswith("Batch")}
    assert len(topics) == 2
    for topic in topics.values():
        assert "KmsMasterKeyId" in topic["Properties"]
    for policy in (v for k, v in built.resources("AWS::SNS::TopicPolicy").items() if k.startswith("Batch")):
        statement = policy["Properties"]["PolicyDocument"]["Statement"][0]
        assert statement["Effect"] == "Deny"
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_async_scales_to_zero_on_backlog_and_out_of_zero_with_a_step_policy(built: Built) -> None:
    target = built.one("AWS::ApplicationAutoScaling::ScalableTarget", "BatchScaling")["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 3)
    tracking = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "BatchScalingBacklog")["Properties"]
    metric = tracking["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    assert metric["MetricName"] == "ApproximateBacklogSizePerInstance"
    assert tracking["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 2
    step = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "BatchScalingScaleOutFromZero")["Properties"]
    assert step["PolicyType"] == "StepScaling"
    assert step["StepScalingPolicyConfiguration"]["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}
    ]
    # No second step before the first instance can answer: the cooldown is the 300 s default cold start, not
    # the 120 s scale-out cooldown.
    assert step["StepScalingPolicyConfiguration"]["Cooldown"] == 300
    alarm = built.one("AWS::CloudWatch::Alarm", "BatchScalingScaleOutFromZero")["Properties"]
    assert alarm["MetricName"] == "HasBacklogWithoutCapacity"
    (action,) = alarm["AlarmActions"]
    assert action["Ref"].startswith("BatchScalingScaleOutFromZeroUpperPolicy")


def test_async_grant_invoke_lets_callers_upload_requests_and_read_results(built: Built) -> None:
    statements = built.policy_statements("Caller")
    data = built.resolve(built.stack.data_bucket.bucket_arn) if built.stack.data_bucket else None
    assert {
        "Action": "sagemaker:InvokeEndpointAsync",
        "Effect": "Allow",
        "Resource": built.resolve(built.stack.endpoints["batch"].endpoint_arn),
    } in statements
    assert {
        "Action": "s3:PutObject",
        "Effect": "Allow",
        "Resource": {"Fn::Join": ["", [data, "/async-input/*"]]},
    } in statements
    reads = next(s for s in statements if s["Action"] == "s3:GetObject")
    assert sorted(map(json.dumps, reads["Resource"])) == sorted(
        json.dumps({"Fn::Join": ["", [data, suffix]]}) for suffix in ("/out/*", "/out-failures/*")
    )


# ----- invoke API


def test_invoke_api_is_an_iam_auth_function_url_that_may_invoke_only_its_endpoint(built: Built) -> None:
    url = next(iter(built.resources("AWS::Lambda::Url").values()))["Properties"]
    assert url["AuthType"] == "AWS_IAM"
    statements = built.policy_statements("InvokeApiRole")
    invoke = [s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"]]
    assert [s["Resource"] for s in invoke] == [built.resolve(built.stack.endpoints["tiny"].endpoint_arn)]
    # The handler calls InvokeEndpoint only: no streaming or async invoke.
    assert [s["Action"] for s in statements if "sagemaker" in json.dumps(s["Action"])] == ["sagemaker:InvokeEndpoint"]
    logs = [s for s in statements if "logs:PutLogEvents" in s["Action"]]
    (log_statement,) = logs
    assert log_statement["Resource"]["Fn::GetAtt"][0].startswith("InvokeApiLogGroup")


def test_invoke_api_callers_get_both_function_url_permissions(built: Built) -> None:
    # AWS_IAM function URLs check lambda:InvokeFunctionUrl and lambda:InvokeFunction (Lambda, October 2025).
    permissions = [
        p["Properties"] for p in built.resources("AWS::Lambda::Permission").values() if p["Properties"]["Principal"]
    ]
    actions = sorted(p["Action"] for p in permissions if p["Principal"] == _CALLER)
    assert actions == ["lambda:InvokeFunction", "lambda:InvokeFunctionUrl"]
    url_permission = next(p for p in permissions if p["Action"] == "lambda:InvokeFunctionUrl")
    assert url_permission["FunctionUrlAuthType"] == "AWS_IAM"
    invoke_permission = next(p for p in permissions if p["Action"] == "lambda:InvokeFunction")
    assert invoke_permission["InvokedViaFunctionUrl"] is True  # only through the URL, not a direct Invoke


def test_invoke_api_function_passes_the_endpoint_name_and_logs_to_an_encrypted_group(built: Built) -> None:
    function = next(iter(built.resources("AWS::Lambda::Function").values()))["Properties"]
    assert function["Environment"]["Variables"]["ENDPOINT_NAME"] == built.resolve(
        built.stack.endpoints["tiny"].endpoint_name
    )
    assert function["Handler"] == "handler.handler"
    group = built.one("AWS::Logs::LogGroup", "InvokeApiLogGroup")["Properties"]
    assert "KmsKeyId" in group and group["RetentionInDays"] == 365


def test_invoke_api_reads_the_model_answer_within_its_own_timeout_and_keeps_its_logs(built: Built) -> None:
    function = next(iter(built.resources("AWS::Lambda::Function").values()))["Properties"]
    # SageMaker fails an invocation after 60 s: the handler waits just above that (65 s), the function just
    # above the handler, so a slow model gets a JSON 504, not a bare 502.
    assert function["Timeout"] == 70
    assert function["Environment"]["Variables"]["INVOKE_TIMEOUT_SECONDS"] == "65"
    # The API fronts the serverless endpoint `tiny`: 4 MB payloads, not the real-time 6 MB.
    assert function["Environment"]["Variables"]["MAX_PAYLOAD_BYTES"] == str(4 * 1024 * 1024)
    group = built.one("AWS::Logs::LogGroup", "InvokeApiLogGroup")
    assert (group["DeletionPolicy"], group["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")


def test_handler_directory_exists() -> None:
    from mlstack.constructs.inference.invoke_api import HANDLER_DIR

    assert (HANDLER_DIR / "handler.py").is_file()
    assert Path(HANDLER_DIR).name == "invoke"


# ----- existing model bucket


def test_an_existing_bucket_is_read_in_place_with_its_key(stages: dict[str, Built]) -> None:
    existing = stages["existing"]
    buckets = sorted(existing.resources("AWS::S3::Bucket"))
    assert [b for b in buckets if b.startswith("ModelBucket")] == []  # no bucket of ours for the model
    statements = existing.policy_statements("CpuExecutionRole")
    read = next(s for s in statements if s["Action"] == "s3:GetObject")
    assert read["Resource"] == "arn:aws:s3:::team-models/team/m.tar.gz"
    decrypt = [s for s in statements if s["Action"] == "kms:Decrypt"]
    assert [s["Resource"] for s in decrypt] == [_EXISTING_KEY]
    model = existing.one("AWS::SageMaker::Model", "CpuModel")["Properties"]
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://team-models/team/m.tar.gz"


def test_metrics_name_the_endpoint_and_variant(built: Built) -> None:
    endpoint = built.stack.endpoints["gpu"]
    name = built.resolve(endpoint.endpoint_name)
    latency = endpoint.metric_model_latency(variant="green")
    assert (latency.metric_name, latency.statistic, latency.namespace) == ("ModelLatency", "p99", "AWS/SageMaker")
    assert built.resolve(latency.dimensions) == {"EndpointName": name, "VariantName": "green"}
    assert endpoint.metric_invocations().statistic == "Sum"
    assert built.resolve(endpoint.metric_invocation_5xx_errors().dimensions)["VariantName"] == "blue"
    assert endpoint.metric_invocation_4xx_errors().metric_name == "Invocation4XXErrors"
    backlog = built.stack.endpoints["batch"].metric_approximate_backlog_size_per_instance()
    assert built.resolve(backlog.dimensions) == {
        "EndpointName": built.resolve(built.stack.endpoints["batch"].endpoint_name)
    }


def test_grants_return_an_iam_grant_that_succeeded(built: Built) -> None:
    assert [g.success for g in built.grants] == [True, True]


# ----- LLM: uncompressed weights, concurrency scaling, host AMI from CUDA, DLC account from the catalog


def test_uncompressed_weights_are_copied_from_a_prefix_the_role_may_list_and_read(stages: dict[str, Built]) -> None:
    llm = stages["llm"]
    container = llm.one("AWS::SageMaker::Model", "Chat")["Properties"]["PrimaryContainer"]
    assert "ModelDataUrl" not in container
    source = container["ModelDataSource"]["S3DataSource"]
    assert source["S3DataType"] == "S3Prefix" and source["CompressionType"] == "None"
    assert "/llama-3-8b/" in json.dumps(source["S3Uri"])
    statements = llm.policy_statements("ChatExecutionRole")
    (listing,) = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["llama-3-8b/*"]}}
    (read,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert json.dumps(read["Resource"]).endswith('"/llama-3-8b/*"]]}')


def test_llm_variant_scales_on_concurrent_requests_per_model(stages: dict[str, Built]) -> None:
    (policy,) = stages["llm"].resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    }
    assert tracking["TargetValue"] == 4


def test_gpu_host_ami_is_pinned_to_the_images_cuda_and_the_dlc_account_comes_from_the_catalog(
    stages: dict[str, Built],
) -> None:
    llm = stages["llm"]
    (variant,) = llm.one("AWS::SageMaker::EndpointConfig", "Chat")["Properties"]["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"  # CUDA 12.4 needs driver 550
    image = json.dumps(llm.one("AWS::SageMaker::Model", "Chat")["Properties"]["PrimaryContainer"]["Image"])
    assert image.startswith('{"Fn::Join": ["", ["763104351884.dkr.ecr.')
