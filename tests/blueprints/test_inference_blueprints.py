"""Inference blueprints, from the session synth: each strategy's endpoint shape, isolation, encryption, plan."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog import get_instance
from mlstack.catalog.hosting_prices import hosting_price
from mlstack.config import load
from mlstack.plan import HOURS_PER_MONTH, build_plan
from tests.conftest import selected_blueprints
from tests.synth import Session

BLUEPRINTS = Path(__file__).resolve().parents[2] / "blueprints"
INFERENCE = [name for name in selected_blueprints() if name.startswith("inference-")]


def _only(name: str) -> list[str]:
    """`[name]` when the session synthesizes it (MLSTACK_TEST_BLUEPRINTS may narrow the session)."""
    return [name] if name in INFERENCE else []


def _resources(session: Session, name: str, kind: str) -> dict[str, dict[str, Any]]:
    template = session.blueprints[name].templates["InferenceStack"]
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _props(session: Session, name: str, kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in _resources(session, name, kind).values()]


def test_there_is_a_blueprint_per_strategy() -> None:
    if not INFERENCE:
        return  # the session was narrowed to other blueprints
    strategies = {
        "inference-gpu-realtime",
        "inference-inferentia2",
        "inference-intel-amx",
        "inference-graviton",
        "inference-serverless",
        "inference-async",
    }
    assert strategies <= set(INFERENCE)


@pytest.mark.parametrize("name", INFERENCE)
def test_builds_the_network_data_and_inference_stacks(session: Session, name: str) -> None:
    # The DataStack (model bucket, image repository) deploys before the endpoints: CreateModel reads both.
    assert list(session.blueprints[name].templates) == ["NetworkStack", "DataStack", "InferenceStack"]
    built = session.blueprints[name]
    assert "DataStack" in built.stacks["InferenceStack"].depends_on
    inference = session.blueprints[name].templates["InferenceStack"]["Resources"]
    assert "ModelBucketB33D855B" not in inference
    if built.config.inference.model.artifact.existing_bucket is None:  # type: ignore[union-attr]
        data = session.blueprints[name].templates["DataStack"]
        assert data["Resources"]["ModelBucketB33D855B"]["Type"] == "AWS::S3::Bucket"
        assert "ModelBucketName" in data["Outputs"]


@pytest.mark.parametrize("name", INFERENCE)
def test_hosted_models_are_network_isolated_in_the_private_subnets(session: Session, name: str) -> None:
    serverless = {e.name for e in session.blueprints[name].config.inference.endpoints if e.mode == "serverless"}  # type: ignore[union-attr]
    for logical_id, model in _resources(session, name, "AWS::SageMaker::Model").items():
        props = model["Properties"]
        if any(logical_id.lower().startswith(s) for s in serverless):
            assert "VpcConfig" not in props
            continue
        assert props["EnableNetworkIsolation"] is True
        assert props["VpcConfig"]["Subnets"] and all(
            "PrivateSubnet" in json.dumps(s) for s in props["VpcConfig"]["Subnets"]
        )


@pytest.mark.parametrize("name", INFERENCE)
def test_no_physical_names_on_replaceable_sagemaker_resources(session: Session, name: str) -> None:
    for kind, prop in [
        ("AWS::SageMaker::Model", "ModelName"),
        ("AWS::SageMaker::EndpointConfig", "EndpointConfigName"),
        ("AWS::SageMaker::Endpoint", "EndpointName"),
    ]:
        assert all(prop not in p for p in _props(session, name, kind)), kind


@pytest.mark.parametrize("name", INFERENCE)
def test_no_physical_names_on_roles_topics_functions_log_groups_or_buckets(session: Session, name: str) -> None:
    # Generated names: a replacement (or a second copy of the blueprint) never fails on "already exists".
    template = session.blueprints[name].templates["InferenceStack"]
    for kind, prop in [
        ("AWS::IAM::Role", "RoleName"),
        ("AWS::SNS::Topic", "TopicName"),
        ("AWS::Lambda::Function", "FunctionName"),
        ("AWS::Logs::LogGroup", "LogGroupName"),
        ("AWS::S3::Bucket", "BucketName"),
        ("AWS::CloudWatch::Alarm", "AlarmName"),
        ("AWS::EC2::SecurityGroup", "GroupName"),
    ]:
        named = [k for k, r in template["Resources"].items() if r["Type"] == kind and prop in r.get("Properties", {})]
        assert named == [], (kind, named)


@pytest.mark.parametrize("name", INFERENCE)
def test_buckets_are_encrypted_tls_only_versioned_and_logged(session: Session, name: str) -> None:
    buckets = _resources(session, name, "AWS::S3::Bucket")
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        assert props["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True
        rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        if logical_id.startswith("AccessLogs"):
            assert rule == {"SSEAlgorithm": "AES256"}  # S3 server access logging delivers to SSE-S3 only
            continue
        assert rule["SSEAlgorithm"] == "aws:kms"
        assert "ProjectKey" in json.dumps(rule["KMSMasterKeyID"])  # the NetworkStack's key
        assert props["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": next(iter(buckets))}
    for policy in _props(session, name, "AWS::S3::BucketPolicy"):
        statements = policy["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )


@pytest.mark.parametrize("name", INFERENCE)
def test_execution_roles_have_no_managed_policies(session: Session, name: str) -> None:
    for role in _props(session, name, "AWS::IAM::Role"):
        assert "ManagedPolicyArns" not in role
    assert "FullAccess" not in json.dumps(session.blueprints[name].templates["InferenceStack"])


def test_the_openvino_dockerfile_tags_the_image_the_intel_blueprint_expects() -> None:
    image = yaml.safe_load((BLUEPRINTS / "inference-intel-amx.yaml").read_text())["inference"]["model"]["image"]
    dockerfile = (BLUEPRINTS.parent / "runtime" / "containers" / "openvino.Dockerfile").read_text()
    assert f"{image['repository']}:{image['tag']}" in dockerfile
    assert f"-t <ImageRepositoryUri>:{image['tag']} ." in dockerfile  # the DataStack's repository, not another


@pytest.mark.parametrize("name", _only("inference-gpu-realtime"))
def test_gpu_realtime_ab_tests_g5_against_g6_without_a_volume_key(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    variants = [(v["InstanceType"], v["InitialVariantWeight"]) for v in config["ProductionVariants"]]
    assert variants == [("ml.g5.2xlarge", 0.8), ("ml.g6.2xlarge", 0.2)]
    assert "KmsKeyId" not in config  # both hosts have local NVMe
    assert config["DataCaptureConfig"]["InitialSamplingPercentage"] == 10
    assert len(_resources(session, name, "AWS::ApplicationAutoScaling::ScalableTarget")) == 2
    (url,) = _props(session, name, "AWS::Lambda::Url")
    assert url["AuthType"] == "AWS_IAM"
    (endpoint,) = _props(session, name, "AWS::SageMaker::Endpoint")
    assert endpoint["RetainAllVariantProperties"] is True  # both variants autoscale: updates keep their counts


@pytest.mark.parametrize("name", _only("inference-inferentia2"))
def test_inferentia2_uses_the_neuron_ami_and_container_and_a_volume_key(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert (variant["InstanceType"], variant["InferenceAmiVersion"]) == (
        "ml.inf2.8xlarge",
        "al2-ami-sagemaker-inference-neuron-2",
    )
    assert "ProjectKey" in json.dumps(config["KmsKeyId"])
    (model,) = _props(session, name, "AWS::SageMaker::Model")
    assert "763104351884.dkr.ecr." in json.dumps(model["PrimaryContainer"]["Image"])
    assert "djl-inference:0.29.0-neuronx" in json.dumps(model["PrimaryContainer"]["Image"])
    # The artifact carries the compiled graph: the container loads it instead of compiling at start-up.
    assert model["PrimaryContainer"]["Environment"]["OPTION_COMPILED_GRAPH_PATH"] == "/opt/ml/model/compiled"


@pytest.mark.parametrize("name", _only("inference-intel-amx"))
def test_intel_amx_serves_the_users_ecr_image_without_nat(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    assert config["ProductionVariants"][0]["InstanceType"] == "ml.c7i.8xlarge"
    assert get_instance("ml.c7i.8xlarge").intel_amx
    (model,) = _props(session, name, "AWS::SageMaker::Model")
    image = json.dumps(model["PrimaryContainer"]["Image"])
    assert '{"Ref": "AWS::AccountId"}' in image and "openvino-model-server-sagemaker:2025.3" in image
    # The DataStack's repository (created, then pushed to, before the endpoint stack deploys) is the one pulled.
    pulls = [
        s
        for p in _props(session, name, "AWS::IAM::Policy")
        for s in p["PolicyDocument"]["Statement"]
        if "ecr:BatchGetImage" in s["Action"]
    ]
    assert '"StackName": "inference-intel-amx-DataStack"' in json.dumps(pulls)
    data = session.blueprints[name].templates["DataStack"]["Resources"]
    (repository,) = [r["Properties"] for r in data.values() if r["Type"] == "AWS::ECR::Repository"]
    assert repository["RepositoryName"] == "openvino-model-server-sagemaker"
    network = session.blueprints[name].templates["NetworkStack"]["Resources"].values()
    assert not [r for r in network if r["Type"] == "AWS::EC2::NatGateway"]
    endpoints = json.dumps([r for r in network if r["Type"] == "AWS::EC2::VPCEndpoint"])
    assert ".ecr.dkr" in endpoints and ".s3" in endpoints


@pytest.mark.parametrize("name", _only("inference-inferentia2"))
def test_an_llm_variant_gets_minutes_to_start_and_a_volume_for_its_weights(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 900  # Neuron: load and shard, with margin
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 600
    assert variant["VolumeSizeInGB"] == 48  # inf2 has no local NVMe: 2.5 x 15 GiB + 10


@pytest.mark.parametrize("name", _only("inference-async"))
def test_async_whisper_runs_the_speech_recognition_pipeline(session: Session, name: str) -> None:
    (model,) = _props(session, name, "AWS::SageMaker::Model")
    assert model["PrimaryContainer"]["Environment"]["HF_TASK"] == "automatic-speech-recognition"


@pytest.mark.parametrize("name", _only("inference-graviton"))
def test_graviton_runs_the_arm64_container_on_c7g(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    assert config["ProductionVariants"][0]["InstanceType"] == "ml.c7g.xlarge"
    assert get_instance("ml.c7g.xlarge").graviton
    (model,) = _props(session, name, "AWS::SageMaker::Model")
    assert "pytorch-inference-graviton" in json.dumps(model["PrimaryContainer"]["Image"])


@pytest.mark.parametrize("name", _only("inference-serverless"))
def test_serverless_has_memory_concurrency_and_no_vpc(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["ServerlessConfig"] == {"MaxConcurrency": 20, "MemorySizeInMB": 4096, "ProvisionedConcurrency": 2}
    assert "DataCaptureConfig" not in config
    assert not _resources(session, name, "AWS::EC2::SecurityGroup")
    assert _props(session, name, "AWS::Lambda::Url")[0]["AuthType"] == "AWS_IAM"


@pytest.mark.parametrize("name", _only("inference-async"))
def test_async_writes_to_s3_notifies_and_scales_from_zero(session: Session, name: str) -> None:
    (config,) = _props(session, name, "AWS::SageMaker::EndpointConfig")
    output = config["AsyncInferenceConfig"]["OutputConfig"]
    assert json.dumps(output["S3OutputPath"]).endswith('"/async-output"]]}')
    assert {"SuccessTopic", "ErrorTopic"} <= set(output["NotificationConfig"])
    (target,) = _props(session, name, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 4)
    kinds = sorted(p["PolicyType"] for p in _props(session, name, "AWS::ApplicationAutoScaling::ScalingPolicy"))
    assert kinds == ["StepScaling", "TargetTrackingScaling"]
    topics = sorted(k[: -len("ABCD1234")] for k in _resources(session, name, "AWS::SNS::Topic"))
    assert topics == ["AlarmTopic", "TranscribeErrorTopic", "TranscribeSuccessTopic"]


@pytest.mark.parametrize("name", _only("inference-async"))
def test_async_outputs_say_where_to_upload_where_results_land_and_what_to_subscribe_to(
    session: Session, name: str
) -> None:
    template = session.blueprints[name].templates["InferenceStack"]
    outputs = template["Outputs"]
    (data_bucket,) = _resources(session, name, "AWS::S3::Bucket").keys() - {
        k for k in _resources(session, name, "AWS::S3::Bucket") if k.startswith("AccessLogs")
    }

    def uri(output: str) -> str:
        parts = outputs[output]["Value"]["Fn::Join"][1]
        assert parts[1] == {"Ref": data_bucket}
        return "".join(p for p in parts if isinstance(p, str)).replace("s3://", "s3://<DataBucket>")

    assert uri("TranscribeAsyncInputUri") == "s3://<DataBucket>/async-input/"
    assert uri("TranscribeAsyncOutputUri") == "s3://<DataBucket>/async-output/"
    assert uri("TranscribeAsyncFailureUri") == "s3://<DataBucket>/async-failures/"
    # The prefix the output names is the one the execution role may read.
    role_policy = next(
        r["Properties"]["PolicyDocument"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and k.startswith("TranscribeExecutionRoleDefaultPolicy")
    )
    reads = [r for s in role_policy["Statement"] if s["Action"] == "s3:GetObject" for r in s["Resource"]]
    assert {"Fn::Join": ["", [{"Fn::GetAtt": [data_bucket, "Arn"]}, "/async-input/*"]]} in reads, reads
    topics = {k[: -len("ABCD1234")]: k for k in _resources(session, name, "AWS::SNS::Topic")}
    assert outputs["TranscribeSuccessTopicArn"]["Value"] == {"Ref": topics["TranscribeSuccessTopic"]}
    assert outputs["TranscribeErrorTopicArn"]["Value"] == {"Ref": topics["TranscribeErrorTopic"]}


def _first_call_section() -> str:
    readme = (BLUEPRINTS.parent / "README.md").read_text(encoding="utf-8")
    return readme.split("**First call.**", 1)[1].split("**Upgrading a deployed inference blueprint**", 1)[0]


def test_the_readme_goes_from_deploy_to_a_first_call_per_mode() -> None:
    section = _first_call_section()
    for step in (
        "awscurl --service lambda",  # the invoke URL is AWS_IAM: SigV4 for the service lambda
        "aws sagemaker-runtime invoke-endpoint --endpoint-name",
        "aws sagemaker-runtime invoke-endpoint-async --endpoint-name",
        "--input-location <TranscribeAsyncInputUri>",
        "aws s3 cp sample.flac <TranscribeAsyncInputUri>",
        "aws sns subscribe --topic-arn <TranscribeSuccessTopicArn>",
        '{"inputs": ',  # TGI and HF pipelines
        '{"instances": [[',  # the OpenVINO server
    ):
        assert step in section, step


@pytest.mark.parametrize(
    ("name", "placeholders"),
    [
        ("inference-gpu-realtime", ["ChatEndpointName", "InvokeUrl"]),
        (
            "inference-async",
            [
                "TranscribeEndpointName",
                "TranscribeAsyncInputUri",
                "TranscribeSuccessTopicArn",
                "TranscribeErrorTopicArn",
            ],
        ),
    ],
)
def test_the_readmes_first_call_names_outputs_the_stack_has(
    name: str, placeholders: list[str], session: Session
) -> None:
    if name not in INFERENCE:
        pytest.skip(f"{name} not synthesized in this session")
    section = _first_call_section()
    outputs = session.blueprints[name].templates["InferenceStack"]["Outputs"]
    for placeholder in placeholders:
        assert f"<{placeholder}>" in section, placeholder
        assert placeholder in outputs, (placeholder, sorted(outputs))


def test_the_readmes_openvino_body_is_what_the_server_decodes() -> None:
    # server.py needs numpy (not in the test venv): read its decoder instead of importing it.
    server = (BLUEPRINTS.parent / "runtime" / "workloads" / "serve" / "server.py").read_text(encoding="utf-8")
    assert 'json.loads(body)["instances"]' in server
    assert '--body \'{"instances": [[' in _first_call_section()


# ----- mlstack plan (no synth)


@pytest.mark.parametrize("name", INFERENCE)
def test_plan_gives_hour_month_and_per_million_figures(name: str) -> None:
    plan = build_plan(load(name))
    titles = [title for title, _ in plan.details["sections"]]
    assert "Inference model" in titles
    for figures, endpoint in zip(plan.details["inference"], load(name).inference.endpoints, strict=True):  # type: ignore[union-attr]
        assert figures["endpoint"] == endpoint.name
        if figures["per_hour"] is None:
            assert plan.unpriced  # an unknown price is listed, never guessed
            continue
        assert figures["per_month"] == pytest.approx(figures["per_hour"] * HOURS_PER_MONTH, abs=0.01)
        assert endpoint.traffic is not None
        rps = endpoint.traffic.requests_per_second
        assert figures["per_million_requests"] == pytest.approx(figures["per_hour"] / (rps * 3600) * 1e6, rel=1e-3)
    assert not any("EC2 on-demand list prices standing in" in w for w in plan.warnings)


@pytest.mark.parametrize("name", sorted(p.stem for p in BLUEPRINTS.glob("inference-*.yaml")))
def test_no_shipped_blueprint_has_a_host_too_small_to_load_its_model(name: str) -> None:
    # One variant failing its start-up health check fails CreateEndpoint and rolls the whole stack back.
    tight = [w for w in build_plan(load(name)).warnings if "of host memory for" in w]
    assert tight == [], tight


def test_plan_sizes_the_gpu_blueprint_from_traffic_at_sagemaker_hosting_rates() -> None:
    plan = build_plan(load("inference-gpu-realtime"))
    (figures,) = plan.details["inference"]
    g5, g6 = hosting_price("ml.g5.2xlarge", "us-east-1"), hosting_price("ml.g6.2xlarge", "us-east-1")
    assert g5 is not None and g6 is not None
    # SageMaker's rates, not the ~40% lower EC2 rates of the same hardware.
    ec2 = get_instance("g5.2xlarge").price_per_hour
    assert ec2 is not None and g5.usd_per_hour > ec2
    # 2 req/s at 1.5/s per instance: 80% -> ceil(1.07) = 2 x g5, 20% -> ceil(0.27) = 1 x g6 (the minimum).
    assert figures["per_hour"] == pytest.approx(2 * g5.usd_per_hour + g6.usd_per_hour, abs=1e-4)
    costs = {c.item: c for c in plan.costs}
    g5_cost = costs["chat/g5: ml.g5.2xlarge SageMaker hosting"]
    assert (g5_cost.unit_per_hour, g5_cost.price_date) == (g5.usd_per_hour, g5.as_of)  # the source's date
    quotas = {q.name: q.needed for q in plan.quotas}
    assert quotas["ml.g5.2xlarge for endpoint usage"] == 4  # autoscaling max


def test_plan_leaves_a_hosting_type_without_a_sagemaker_rate_unpriced() -> None:
    plan = build_plan(load("inference-graviton"))
    assert plan.unpriced == ["classify/AllTraffic: ml.c7g.xlarge SageMaker hosting"]
    assert any("no SageMaker hosting price in the catalog for ml.c7g.xlarge" in w for w in plan.warnings)
    # ml.inf2.8xlarge has a dated SageMaker hosting rate now (never the EC2 inf2.8xlarge rate, $1.96786/h)
    inf2 = build_plan(load("inference-inferentia2"))
    assert inf2.unpriced == [] and any(c.unit_per_hour == 2.36 for c in inf2.costs)


def test_plan_async_scale_to_zero_counts_the_cooldown_and_the_cold_start() -> None:
    plan = build_plan(load("inference-async"))
    (figures,) = plan.details["inference"]
    price = hosting_price("ml.g5.xlarge", "us-east-1")
    assert price is not None
    # A request every 100 s never leaves a 600 s gap: the instance is up nearly all month, not 20% of it.
    down = math.exp(-0.01 * 600)
    expected = min(1.0, 1 - down + 0.01 * down * 300)
    assert expected > 0.99
    assert figures["per_hour"] == pytest.approx(expected * price.usd_per_hour, abs=1e-4)


def test_plan_warns_when_a_realtime_variant_can_run_a_single_instance() -> None:
    warnings = build_plan(load("inference-gpu-realtime")).warnings
    assert any(w.startswith("chat/g5: runs a single ml.g5.2xlarge at times: no Availability Zone") for w in warnings)
    assert not any("runs a single" in w for w in build_plan(load("inference-intel-amx")).warnings)


def test_plan_leaves_serverless_unpriced_and_says_so() -> None:
    plan = build_plan(load("inference-serverless"))
    assert plan.unpriced == ["sentiment: serverless compute + requests"]
    rows = dict(plan.details["sections"])["Endpoint sentiment (serverless)"]
    assert any("GB-seconds/month" in row for row in rows)


def test_planning_does_not_import_the_cdk() -> None:
    # `mlstack plan` must not start jsii/Node: the plan code lives apart from InferenceStack.
    code = "import sys, mlstack.plan.inference; assert 'aws_cdk' not in sys.modules, 'aws_cdk imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("name", INFERENCE)
def test_plan_says_sagemaker_quota_codes_are_unknown_instead_of_a_dash(name: str) -> None:
    plan = build_plan(load(name))
    sagemaker = [q for q in plan.quotas if q.service == "sagemaker"]
    assert sagemaker
    assert all(q.code == "unknown" for q in sagemaker), sagemaker
    assert any("find each sagemaker quota by its name in the Service Quotas console" in w for w in plan.warnings)


@pytest.mark.parametrize("name", ["inference-gpu-realtime", "inference-async"])
def test_plan_warns_about_changing_the_instance_type_of_an_autoscaled_variant(name: str) -> None:
    # UpdateEndpoint fails while the variant is an Application Auto Scaling target (SageMaker Developer Guide,
    # "Update or delete an endpoint that uses automatic scaling": deregister the scalable target first).
    plan = build_plan(load(name))
    (warning,) = [w for w in plan.warnings if "instance type of an autoscaled variant" in w]
    assert "deploy once without its autoscaling, then with the new type" in warning


def test_plan_of_an_inf1_variant_keeps_the_default_ami_and_warns_about_guardrails(tmp_path: Path) -> None:
    document = yaml.safe_load((BLUEPRINTS / "inference-inferentia2.yaml").read_text())
    document["inference"]["endpoints"][0]["variants"][0]["instance_type"] = "ml.inf1.6xlarge"  # 48 GiB host RAM
    path = tmp_path / "inf1.yaml"
    path.write_text(yaml.safe_dump(document))
    plan = build_plan(load(str(path)))
    rows = dict(plan.details["sections"])["Endpoint chat (realtime)"]
    assert any("InferenceAmiVersion SageMaker's default" in row for row in rows), rows
    assert any("guardrails" in w and "inf1" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (
            {"instance_type": "ml.c7g.xlarge", "instance_count": 2},
            "classify/AllTraffic: the traffic needs 4 instances (100/s at 25/s each) but at most 2 run; "
            "raise instance_count (the cost above is for 2)",
        ),
        (
            {
                "instance_type": "ml.c7g.xlarge",
                "instance_count": 2,
                "autoscaling": {"min_instances": 2, "max_instances": 3, "target_invocations_per_instance": 1200},
            },
            "but at most 3 run; raise autoscaling max_instances",
        ),
    ],
    ids=["fixed", "autoscaled"],
)
def test_plan_warns_when_the_traffic_needs_more_instances_than_can_run(
    tmp_path: Path, variant: dict[str, Any], message: str
) -> None:
    document = yaml.safe_load((BLUEPRINTS / "inference-graviton.yaml").read_text())
    endpoint = document["inference"]["endpoints"][0]
    endpoint["variants"] = [variant]
    endpoint["traffic"]["requests_per_second"] = 100
    path = tmp_path / "busy.yaml"
    path.write_text(yaml.safe_dump(document))
    warnings = build_plan(load(str(path))).warnings
    assert any(message in w for w in warnings), warnings
    assert not any("the traffic needs" in w for w in build_plan(load("inference-graviton")).warnings)


def test_plan_adds_up_the_quota_of_variants_and_endpoints_on_one_instance_type(tmp_path: Path) -> None:
    # "ml.g5.2xlarge for endpoint usage" is one quota per account and region, not one per variant.
    document = yaml.safe_load((BLUEPRINTS / "inference-gpu-realtime.yaml").read_text())
    chat = document["inference"]["endpoints"][0]
    chat["variants"][1]["instance_type"] = "ml.g5.2xlarge"  # max 2
    document["inference"]["endpoints"].append(
        {"name": "batch", "mode": "async", "instance_type": "ml.g5.2xlarge", "instance_count": 3, "output_path": "o"}
    )
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(document))
    quotas = [q for q in build_plan(load(str(path))).quotas if q.service == "sagemaker"]
    assert [(q.name, q.needed) for q in quotas] == [("ml.g5.2xlarge for endpoint usage", 4 + 2 + 3)]


def test_plan_says_provisioned_concurrency_is_billed_while_idle() -> None:
    rows = dict(build_plan(load("inference-serverless")).details["sections"])["Endpoint sentiment (serverless)"]
    assert "provisioned concurrency: 2 x 4096 MB kept warm and billed every hour, used or not" in " ".join(rows)
