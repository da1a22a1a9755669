"""`ModelEndpoint` from keyword props alone, in a plain `aws_cdk.Stack`: the README's "from your own CDK app"
example is run as it stands and its template asserted. Nothing here imports the blueprint schema."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

import mlstack.constructs.inference as inference
from mlstack.constructs.inference import ModelEndpoint, ServerlessServing, ServingImage

PACKAGE = Path(inference.__file__).parent
README = PACKAGE / "README.md"


def _readme_example() -> str:
    section = README.read_text(encoding="utf-8").split("### From your own CDK app", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_readme_example(), str(README), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def template(example: dict[str, Any]) -> Template:
    return Template.from_stack(example["stack"])


def test_the_example_imports_no_blueprint_schema() -> None:
    assert "mlstack.config" not in _readme_example()


def test_no_inference_construct_module_imports_the_blueprint_schema() -> None:
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not any(n == "mlstack.config" or n.startswith("mlstack.config.") for n in names), path.name


def test_the_model_copies_uncompressed_weights_isolated_in_the_private_subnets(template: Template) -> None:
    template.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "EnableNetworkIsolation": True,
            "PrimaryContainer": {
                "Image": {"Fn::Join": ["", Match.array_with([Match.string_like_regexp("^763104351884.dkr.ecr.")])]},
                "ModelDataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "CompressionType": "None"}},
                "ModelDataUrl": Match.absent(),
                "Environment": {"HF_MODEL_ID": "/opt/ml/model"},
            },
            "VpcConfig": {"Subnets": Match.array_with([{"Ref": Match.string_like_regexp("PrivateSubnet1")}])},
        },
    )


def test_the_variant_carries_the_pinned_ami_and_start_up_timeout_and_no_volume_key(template: Template) -> None:
    (config,) = template.find_resources("AWS::SageMaker::EndpointConfig").values()
    properties = config["Properties"]
    assert "KmsKeyId" not in properties
    (variant,) = properties["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 600
    assert variant["InitialInstanceCount"] == 2 and variant["VariantName"] == "AllTraffic"


def test_the_variant_scales_on_concurrent_requests_and_keeps_its_counts_on_update(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "TargetTrackingScalingPolicyConfiguration": {
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
                },
                "TargetValue": 4,
            }
        },
    )
    template.has_resource_properties("AWS::SageMaker::Endpoint", {"RetainAllVariantProperties": True})


def test_alarms_use_the_thresholds_and_notify_the_topic(template: Template) -> None:
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == 2
    latency = next(a for a in alarms.values() if a["Properties"]["MetricName"] == "ModelLatency")
    assert latency["Properties"]["Threshold"] == 20_000_000  # microseconds
    assert latency["Properties"]["AlarmDescription"] == "chat/AllTraffic: p99 latency above 20000 ms"
    (topic_id,) = template.find_resources("AWS::SNS::Topic")
    assert all(a["Properties"]["AlarmActions"] == [{"Ref": topic_id}] for a in alarms.values())


def test_grant_invoke_and_metric_options(example: dict[str, Any], template: Template) -> None:
    statements = json.dumps(template.find_resources("AWS::IAM::Policy"))
    assert "sagemaker:InvokeEndpointWithResponseStream" in statements
    metric = example["dashboard_metric"]
    assert metric.statistic == "p90" and metric.period.to_minutes() == 5


def test_alarms_are_optional_and_serverless_needs_no_vpc() -> None:
    stack = cdk.Stack(cdk.App(), "Bare")
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    ModelEndpoint(
        stack,
        "Tiny",
        serving=ServerlessServing(memory_mb=2048, max_concurrency=5),
        image=ServingImage.from_registry("serving", "v1"),
        artifact_bucket=s3.Bucket(stack, "Models", encryption_key=key),
        artifact_key="m/model.tar.gz",
        key=key,
        alarms=None,
    )
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::CloudWatch::Alarm", 0)
    template.resource_count_is("AWS::EC2::SecurityGroup", 0)
    template.has_resource_properties(
        "AWS::SageMaker::Model", {"EnableNetworkIsolation": False, "VpcConfig": Match.absent()}
    )


def test_a_realtime_endpoint_without_a_vpc_says_so() -> None:
    from mlstack.constructs.inference import RealtimeServing, Variant

    stack = cdk.Stack(cdk.App(), "NoVpc")
    key = kms.Key(stack, "Key")
    with pytest.raises(ValueError, match="realtime endpoint 'chat' runs hosts in a VPC: pass vpc"):
        ModelEndpoint(
            stack,
            "Chat",
            serving=RealtimeServing(variants=[Variant(instance_type="ml.c7i.xlarge")]),
            image=ServingImage.from_registry("serving", "v1"),
            artifact_bucket=s3.Bucket(stack, "Models"),
            artifact_key="m/model.tar.gz",
            key=key,
        )
