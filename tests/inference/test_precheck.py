"""The deploy sequence of an inference blueprint, on moto: deploy the DataStack, upload and push, run the
pre-deploy check (`mlstack precheck`) before the InferenceStack.

moto's CloudFormation creates the DataStack's bucket and ECR repository from the synthesized template (the
network stack's key output, a `Fn::GetStackOutput` moto does not resolve, is replaced by a moto key's ARN).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from moto import mock_aws

from mlstack import blueprint, cli
from mlstack import config as blueprint_config
from mlstack.config import BlueprintConfig
from mlstack.precheck import instances_needed, run_precheck
from mlstack.synth_all import cdk_json_context
from tests.synth import TEST_CONTEXT

NAME = "inference-intel-amx"  # an ECR image of this account: the DataStack holds bucket and repository
REGION = "us-east-1"


@pytest.fixture(scope="module")
def loaded() -> BlueprintConfig:
    return blueprint_config.load(NAME)


@pytest.fixture(scope="module")
def data_template(loaded: BlueprintConfig, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("precheck")), context={**cdk_json_context(), **TEST_CONTEXT})
    built = blueprint.build(app, loaded)
    assert built.data is not None
    template: dict[str, Any] = app.synth().get_stack_by_name(built.data.stack_name).template
    template.pop("Rules", None)
    template.get("Parameters", {}).pop("BootstrapVersion", None)
    return template


def _replace_stack_outputs(value: Any, replacement: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {"Fn::GetStackOutput"}:
            return replacement
        return {k: _replace_stack_outputs(v, replacement) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_stack_outputs(v, replacement) for v in value]
    return value


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.Session]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield boto3.Session(region_name=REGION)


@pytest.fixture
def deployed(aws: boto3.Session, data_template: dict[str, Any]) -> dict[str, str]:
    """Step 1: `cdk deploy DataStack` (here: moto's CloudFormation creates the template)."""
    key_arn = aws.client("kms").create_key()["KeyMetadata"]["Arn"]
    body = json.dumps(_replace_stack_outputs(data_template, key_arn))
    cfn = aws.client("cloudformation")
    cfn.create_stack(StackName=f"{NAME}-DataStack", TemplateBody=body)
    (stack,) = cfn.describe_stacks(StackName=f"{NAME}-DataStack")["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


def _upload_and_push(aws: boto3.Session, bucket: str, loaded: BlueprintConfig) -> None:
    """Step 2: upload the artifact and push the image."""
    assert loaded.inference is not None
    aws.client("s3").put_object(Bucket=bucket, Key=loaded.inference.model.artifact.key, Body=b"model")
    image = loaded.inference.model.image
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    aws.client("ecr").put_image(repositoryName=image.repository, imageManifest=json.dumps(manifest), imageTag=image.tag)


@pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")
def test_the_readme_sequence_passes_the_check_once_the_data_stack_is_filled(
    aws: boto3.Session, deployed: dict[str, str], loaded: BlueprintConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = deployed["ModelBucketName"]
    assert aws.client("ecr").describe_repositories()["repositories"][0]["repositoryName"] == (
        "openvino-model-server-sagemaker"
    )
    # Step 3 before step 2: both things CreateModel reads are missing, one line each, exit 1.
    assert cli.main(["precheck", NAME]) == 1
    missing = [line for line in capsys.readouterr().out.splitlines() if line.startswith("missing:")]
    assert missing == [
        f"missing: model artifact s3://{bucket}/bert-large-int8-openvino/model.tar.gz does not exist: upload it "
        f"(aws s3 cp model.tar.gz s3://{bucket}/bert-large-int8-openvino/model.tar.gz)",
        f"missing: image openvino-model-server-sagemaker:2025.3 is not in ECR in {REGION}: docker push it first",
    ]
    _upload_and_push(aws, bucket, loaded)
    assert cli.main(["precheck", NAME]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"ok: {NAME}")


@pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")
def test_a_missing_artifact_fails_with_one_clear_line(
    aws: boto3.Session, deployed: dict[str, str], loaded: BlueprintConfig
) -> None:
    bucket = deployed["ModelBucketName"]
    _upload_and_push(aws, bucket, loaded)
    assert loaded.inference is not None
    aws.client("s3").delete_object(Bucket=bucket, Key=loaded.inference.model.artifact.key)
    result = run_precheck(loaded, aws)
    assert result.problems == [
        f"model artifact s3://{bucket}/bert-large-int8-openvino/model.tar.gz does not exist: upload it "
        f"(aws s3 cp model.tar.gz s3://{bucket}/bert-large-int8-openvino/model.tar.gz)"
    ]


def test_without_the_data_stack_the_check_says_to_deploy_it_first(aws: boto3.Session, loaded: BlueprintConfig) -> None:
    problems = run_precheck(loaded, aws).problems
    assert problems[0].startswith(f"stack {NAME}-DataStack is not deployed in {REGION}")
    assert problems[0].endswith(f"run npx cdk deploy DataStack -c blueprint={NAME} first")


def test_an_artifact_in_another_region_is_reported(aws: boto3.Session, loaded: BlueprintConfig) -> None:
    data = loaded.model_dump(mode="json")
    data["inference"]["model"]["artifact"] = {"key": "m/model.tar.gz", "existing_bucket": "team-models-eu"}
    s3 = aws.client("s3", region_name="eu-west-1")
    s3.create_bucket(Bucket="team-models-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    problems = run_precheck(BlueprintConfig.model_validate(data), aws).problems
    assert problems[0].startswith("model bucket team-models-eu is in eu-west-1, but the endpoints deploy in us-east-1")


def test_quota_need_is_each_types_largest_count_summed_over_variants(loaded: BlueprintConfig) -> None:
    assert loaded.inference is not None
    assert instances_needed(loaded.inference) == {"ml.c7i.8xlarge": 6}
