"""A ModelEndpoint stack deployed on moto's CloudFormation: the template's references and ordering resolve.

moto only knows old SageMaker instance types (its list of valid instance types predates ml.g5 and ml.c7i): its
instance-type check is patched out here.
It skips Application Auto Scaling, alarms, bucket and topic policies and SG egress, so those stay covered by the
template assertions in test_model_endpoint.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from moto import mock_aws
from moto.sagemaker import models as sagemaker_models

from mlstack.constructs.inference import (
    AsyncServing,
    DataCapture,
    ModelEndpoint,
    RealtimeServing,
    ServingImage,
    Variant,
)
from mlstack.synth_all import cdk_json_context
from tests.synth import TEST_CONTEXT

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("moto")), context={**cdk_json_context(), **TEST_CONTEXT})
    stack = cdk.Stack(app, "Endpoints", env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        availability_zones=[f"{REGION}a", f"{REGION}b"],
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
        restrict_default_security_group=False,  # its custom resource would need Docker in moto
    )
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    models = s3.Bucket(stack, "Models", encryption_key=key)
    data = s3.Bucket(stack, "Data", encryption_key=key)
    image = ServingImage.from_registry("serving", "v1")
    servings: dict[str, RealtimeServing | AsyncServing] = {
        "Cpu": RealtimeServing(
            variants=[Variant(instance_type="ml.c7i.8xlarge", instance_count=2)],
            data_capture=DataCapture(sampling_percent=50),
        ),
        "Jobs": AsyncServing(variant=Variant(instance_type="ml.g5.xlarge"), output_prefix="out", volume_kms_key=False),
    }
    for construct_id, serving in servings.items():
        ModelEndpoint(
            stack,
            construct_id,
            serving=serving,
            image=image,
            artifact_bucket=models,
            artifact_key="m/model.tar.gz",
            key=key,
            vpc=vpc,
            subnets=vpc.isolated_subnets,
            data_bucket=data,
        )
    result: dict[str, Any] = app.synth().get_stack_by_name("Endpoints").template
    result.pop("Rules", None)
    result.get("Parameters", {}).pop("BootstrapVersion", None)
    return result


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sagemaker_models.FakeEndpointConfig, "validate_instance_type", lambda self, _: None)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        yield


@pytest.mark.usefixtures("aws")
@pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")  # the skipped types named in the docstring
def test_endpoints_deploy_and_reference_their_model_config_and_key(template: dict[str, Any]) -> None:
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="endpoints", TemplateBody=json.dumps(template), Capabilities=["CAPABILITY_IAM"])
    (stack,) = cfn.describe_stacks(StackName="endpoints")["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    endpoints = {e["EndpointName"]: e for e in sagemaker.list_endpoints()["Endpoints"]}
    assert len(endpoints) == 2
    configs = [
        sagemaker.describe_endpoint_config(
            EndpointConfigName=sagemaker.describe_endpoint(EndpointName=n)["EndpointConfigName"]
        )
        for n in endpoints
    ]
    by_type = {c["ProductionVariants"][0]["InstanceType"]: c for c in configs}
    key_arn = boto3.client("kms", region_name=REGION).list_keys()["Keys"][0]["KeyArn"]
    cpu = by_type["ml.c7i.8xlarge"]
    assert cpu["KmsKeyId"] == key_arn
    assert cpu["DataCaptureConfig"]["InitialSamplingPercentage"] == 50
    jobs = by_type["ml.g5.xlarge"]
    assert "KmsKeyId" not in jobs  # local NVMe host
    assert jobs["AsyncInferenceConfig"]["OutputConfig"]["S3OutputPath"].endswith("/out")

    for config in configs:
        model = sagemaker.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
        # (moto does not keep EnableNetworkIsolation; test_model_endpoint.py asserts it on the template.)
        role = model["ExecutionRoleArn"].rsplit("/", 1)[1]
        assert (
            boto3.client("iam", region_name=REGION).get_role(RoleName=role)["Role"]["Arn"] == model["ExecutionRoleArn"]
        )
        assert len(model["VpcConfig"]["Subnets"]) == 2
        assert model["PrimaryContainer"]["Image"] == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/serving:v1"
