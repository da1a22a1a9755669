"""The first pipeline run, approval and invocation, as SageMaker, KMS, S3, Logs and EventBridge see the templates.

Each test reads the exact statements and properties a call at first use depends on (the role that makes the call,
the resource ARN form, the condition) from the session synth of both MLOps blueprints.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import selected_blueprints
from tests.synth import Session

MLOPS = [name for name in selected_blueprints() if name.startswith("mlops-")]
CPU = [n for n in MLOPS if n == "mlops-pipeline"]
EFA = [n for n in MLOPS if n == "mlops-efa-training"]
KEY_OUTPUT = "PublishOutputFnGetAttProjectKey"


def _resources(session: Session, name: str, kind: str, stack: str = "MlopsStack") -> dict[str, dict[str, Any]]:
    resources = session.blueprints[name].templates[stack]["Resources"]
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def _statements(session: Session, name: str, role_prefix: str) -> list[dict[str, Any]]:
    (policy,) = [
        p
        for p in _resources(session, name, "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"][0]["Ref"].startswith(role_prefix)
    ]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def _is_project_key(resource: Any) -> bool:
    return KEY_OUTPUT in json.dumps(resource)


def _steps(session: Session, name: str) -> dict[str, dict[str, Any]]:
    (pipeline,) = _resources(session, name, "AWS::SageMaker::Pipeline").values()
    body = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    definition = json.loads("".join(p if isinstance(p, str) else "<token>" for p in parts))
    steps = {s["Name"]: s for s in definition["Steps"]}
    for step in definition["Steps"]:
        if step["Type"] == "Condition":
            steps.update({s["Name"]: s for s in step["Arguments"]["IfSteps"]})
    return steps


VOLUME_GRANT = {
    "Bool": {"kms:GrantIsForAWSResource": "true"},
    "StringEquals": {"kms:ViaService": "sagemaker.us-east-1.amazonaws.com"},
}


def _volume_grants(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in statements if "kms:CreateGrant" in _actions(s)]


@pytest.mark.parametrize("name", MLOPS)
def test_roles_that_pass_a_volume_key_may_create_the_grant(session: Session, name: str) -> None:
    """Item 1: the job role (processing, training), the monitoring role and, where the endpoint has a volume key,
    the deploy function (CreateEndpoint/UpdateEndpoint) may create a grant, for AWS resources via SageMaker only."""
    expect_function = name == "mlops-pipeline"  # the EFA blueprint serves on ml.g5 (local NVMe: no volume key)
    for role, expected in (
        ("PipelineJobRole", True),
        ("ApprovalDeployMonitorRole", True),
        ("ApprovalDeployFunctionRole", expect_function),
        ("PipelinePipelineRole", False),
        ("ApprovalDeployModelRole", False),
    ):
        statements = _statements(session, name, role)
        grants = _volume_grants(statements)
        if not expected:
            assert grants == [], role
            continue
        (grant,) = grants
        assert _actions(grant) == ["kms:CreateGrant"], role
        assert grant["Condition"] == VOLUME_GRANT, role
        assert _is_project_key(grant["Resource"]), role
        assert any(_actions(s) == ["kms:DescribeKey"] and _is_project_key(s["Resource"]) for s in statements), role


@pytest.mark.parametrize("name", MLOPS)
def test_the_project_key_policy_delegates_to_iam(session: Session, name: str) -> None:
    """Item 1, key side: the key policy lets the account's IAM policies grant use of the key (root statement)."""
    (key,) = _resources(session, name, "AWS::KMS::Key", "NetworkStack").values()
    root = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") is None and s["Action"] == "kms:*"]
    assert root and ":root" in json.dumps(root[0]["Principal"])


@pytest.mark.parametrize("name", EFA)
def test_local_nvme_training_takes_no_volume_key_or_size(session: Session, name: str) -> None:
    """Item 2: ml.p4d.24xlarge trains on its instance storage."""
    resources = _steps(session, name)["Train"]["Arguments"]["ResourceConfig"]
    assert resources == {
        "InstanceType": {"Get": "Parameters.TrainingInstanceType"},
        "InstanceCount": resources["InstanceCount"],
    }


@pytest.mark.parametrize("name", CPU)
def test_ebs_training_keeps_its_encrypted_volume(session: Session, name: str) -> None:
    resources = _steps(session, name)["Train"]["Arguments"]["ResourceConfig"]
    assert resources["VolumeSizeInGB"] == 50
    assert resources["VolumeKmsKeyId"] == "<token>"


@pytest.mark.parametrize("name", MLOPS)
def test_code_inputs_can_be_listed(session: Session, name: str) -> None:
    """Item 3: an S3Prefix input is listed first; the job role lists the asset bucket for exactly the code keys."""
    steps = _steps(session, name)
    statements = _statements(session, name, "PipelineJobRole")
    (listing,) = [s for s in statements if s.get("Sid") == "ListCodeAssets"]
    assert listing["Action"] == "s3:ListBucket"
    assert "cdk-hnb659fds-assets-" in json.dumps(listing["Resource"])
    keys = listing["Condition"]["StringEquals"]["s3:prefix"]
    assert len(keys) == 3
    # The code inputs' S3Uri are the asset URLs (tokens); their file names are the keys the role may list.
    entry = steps["Preprocess"]["Arguments"]["AppSpecification"]["ContainerEntrypoint"][1]
    assert entry.rsplit("/", 1)[1] in keys
    assert steps["Train"]["Arguments"]["HyperParameters"]["sagemaker_program"].strip('"') in keys


@pytest.mark.parametrize("name", MLOPS)
def test_the_pipeline_role_reads_the_evaluation_report_for_jsonget(session: Session, name: str) -> None:
    """Item 4: CheckAccuracy's Std:JsonGet reads evaluation.json (KMS-encrypted) as the pipeline role."""
    statements = _statements(session, name, "PipelinePipelineRole")
    (read,) = [s for s in statements if s.get("Sid") == "ReadEvaluationReport"]
    assert read["Action"] == "s3:GetObject"
    assert read["Resource"]["Fn::Join"][1][-1] == "/runs/*/evaluation/*"
    assert any("kms:Decrypt" in _actions(s) and _is_project_key(s["Resource"]) for s in statements)
    report = _steps(session, name)["Evaluate"]["Arguments"]["ProcessingOutputConfig"]["Outputs"][0]
    assert report["OutputName"] == "evaluation"
    assert report["S3Output"]["S3Uri"]["Std:Join"]["Values"][-1] == "evaluation"


@pytest.mark.parametrize("name", MLOPS)
def test_sagemaker_log_groups_use_the_colon_arn_form(session: Session, name: str) -> None:
    """Item 6: arn:aws:logs:<region>:<account>:log-group:/aws/sagemaker/... and its :log-stream:* for PutLogEvents."""
    for role, kinds in (
        ("PipelineJobRole", ("ProcessingJobs", "TrainingJobs")),
        ("ApprovalDeployModelRole", ("Endpoints", "ProcessingJobs")),
        ("ApprovalDeployMonitorRole", ("Endpoints", "ProcessingJobs")),
    ):
        (logs,) = [s for s in _statements(session, name, role) if s.get("Sid") == "SageMakerLogs"]
        tails = [r["Fn::Join"][1][-1] for r in logs["Resource"]]
        assert tails == [
            tail
            for kind in kinds
            for tail in (f":log-group:/aws/sagemaker/{kind}*", f":log-group:/aws/sagemaker/{kind}*:log-stream:*")
        ], role
        assert all(r["Fn::Join"][1][0] == "arn:aws:logs:us-east-1:" for r in logs["Resource"])
        assert "log-group//" not in json.dumps(logs)


@pytest.mark.parametrize("name", MLOPS)
def test_approvals_need_no_reserved_concurrency_and_dead_letters_can_be_written(session: Session, name: str) -> None:
    """Item 7: no ReservedConcurrentExecutions (fails in new accounts); the function may encrypt to its KMS DLQ;
    rejections reach the function too (rolling back)."""
    ((function_id, function),) = _resources(session, name, "AWS::Lambda::Function").items()
    assert "ReservedConcurrentExecutions" not in function["Properties"]
    (queue_id,) = _resources(session, name, "AWS::SQS::Queue")
    assert function["Properties"]["DeadLetterConfig"]["TargetArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    statements = _statements(session, name, "ApprovalDeployFunctionRole")
    assert any(
        {"kms:GenerateDataKey", "kms:Decrypt"} <= set(_actions(s)) and _is_project_key(s["Resource"])
        for s in statements
    )
    assert any("sqs:SendMessage" in _actions(s) for s in statements)
    lists = next(s for s in statements if s.get("Sid") == "ListVersions")
    assert lists["Action"] == "sagemaker:ListModelPackages"
    endpoint = next(s for s in statements if s.get("Sid") == "Endpoint")
    assert {"sagemaker:ListTags", "sagemaker:AddTags"} <= set(endpoint["Action"])
    rules = {k: v["Properties"] for k, v in _resources(session, name, "AWS::Events::Rule").items()}
    approval = next(v for k, v in rules.items() if k.startswith("ApprovalDeployApprovalRule"))
    assert approval["EventPattern"]["detail"]["ModelApprovalStatus"] == ["Approved", "Rejected"]
    assert approval["Targets"][0]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}


@pytest.mark.parametrize("name", MLOPS)
def test_the_baseline_is_computed_in_the_captured_layout(session: Session, name: str) -> None:
    """Item 8: the analyzer reads the file evaluate.py writes (model output first, then the features)."""
    steps = _steps(session, name)
    evaluate = steps["Evaluate"]["Arguments"]
    outputs = {o["OutputName"]: o for o in evaluate["ProcessingOutputConfig"]["Outputs"]}
    assert outputs["baseline"]["S3Output"]["LocalPath"] == "/opt/ml/processing/baseline"
    inputs = {i["InputName"]: i for i in evaluate["ProcessingInputs"]}
    assert inputs["train"]["S3Input"]["S3Uri"] == {
        "Get": "Steps.Preprocess.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"
    }
    baseline = steps["Baseline"]["Arguments"]
    (source,) = baseline["ProcessingInputs"]
    assert source["S3Input"]["S3Uri"] == {
        "Get": "Steps.Evaluate.ProcessingOutputConfig.Outputs['baseline'].S3Output.S3Uri"
    }
    assert json.loads(baseline["Environment"]["dataset_format"]) == {
        "csv": {"header": True, "output_columns_position": "START"}
    }


@pytest.mark.parametrize("name", MLOPS)
def test_failures_notify_an_encrypted_topic(session: Session, name: str) -> None:
    """Item 9: failed executions, function errors, dead letters and monitoring violations reach the alarm topic,
    which the project key encrypts and which CloudWatch and EventBridge may encrypt to."""
    ((topic_id, topic),) = _resources(session, name, "AWS::SNS::Topic").items()
    assert _is_project_key(topic["Properties"]["KmsMasterKeyId"])
    rules = {k: v["Properties"] for k, v in _resources(session, name, "AWS::Events::Rule").items()}
    failed = next(v for k, v in rules.items() if k.startswith("PipelineFailedExecutionRule"))
    assert failed["EventPattern"]["detail-type"] == ["SageMaker Model Building Pipeline Execution Status Change"]
    assert failed["EventPattern"]["detail"]["currentPipelineExecutionStatus"] == ["Failed"]
    assert failed["EventPattern"]["detail"]["pipelineArn"][0]["Fn::Join"][1][-1] == f":pipeline/{name}-pipeline"
    monitoring = next(v for k, v in rules.items() if k.startswith("ApprovalDeployMonitoringRule"))
    assert monitoring["EventPattern"]["detail"]["$or"] == [
        {"ExitMessage": [{"prefix": "CompletedWithViolations"}]},
        {"ProcessingJobStatus": ["Failed"]},
    ]
    for rule in (failed, monitoring):
        assert rule["Targets"][0]["Arn"] == {"Ref": topic_id}
    alarms = {k: v["Properties"] for k, v in _resources(session, name, "AWS::CloudWatch::Alarm").items()}
    metrics = sorted(a["MetricName"] for a in alarms.values())
    assert metrics == ["ApproximateNumberOfMessagesVisible", "Errors", "FailedDeployments"]
    assert all(a["AlarmActions"] == [{"Ref": topic_id}] for a in alarms.values())
    (policy,) = _resources(session, name, "AWS::SNS::TopicPolicy").values()
    principals = [s.get("Principal") for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    assert {"Service": "events.amazonaws.com"} in principals
    assert {"Service": "cloudwatch.amazonaws.com"} in principals
    (key,) = _resources(session, name, "AWS::KMS::Key", "NetworkStack").values()
    by_sid = {s.get("Sid"): s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    for sid, service in (
        ("AllowEventBridgeToEncryptedTopics", "events.amazonaws.com"),
        ("AllowCloudWatchAlarmsToEncryptedTopics", "cloudwatch.amazonaws.com"),
    ):
        assert by_sid[sid]["Principal"] == {"Service": service}
        assert set(by_sid[sid]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}


@pytest.mark.parametrize("name", MLOPS)
def test_a_failed_endpoint_or_rolled_back_deployment_notifies_the_topic(session: Session, name: str) -> None:
    """A CreateEndpoint that ends Failed runs no function (EventBridge tells the topic); an update SageMaker rolled
    back is only a "failed-deployment" log line of a function that succeeded (a metric filter's alarm tells it)."""
    from mlstack.constructs.sagemaker.approval_deploy import FAILED_DEPLOYMENT_PATTERN

    ((topic_id, _),) = _resources(session, name, "AWS::SNS::Topic").items()
    rules = {k: v["Properties"] for k, v in _resources(session, name, "AWS::Events::Rule").items()}
    failed = next(v for k, v in rules.items() if k.startswith("ApprovalDeployEndpointFailedRule"))
    assert failed["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Endpoint State Change"],
        "detail": {"EndpointName": [f"{name}-serving"], "EndpointStatus": ["FAILED"]},
    }
    assert failed["State"] == "ENABLED"
    (target,) = failed["Targets"]
    assert target["Arn"] == {"Ref": topic_id}
    (log_group_id,) = [k for k in _resources(session, name, "AWS::Logs::LogGroup") if k.startswith("ApprovalDeploy")]
    (function,) = _resources(session, name, "AWS::Lambda::Function").values()
    assert function["Properties"]["LoggingConfig"]["LogGroup"] == {"Ref": log_group_id}
    assert "LogFormat" not in function["Properties"]["LoggingConfig"]  # Text: the line the runtime test formats
    (metric_filter,) = _resources(session, name, "AWS::Logs::MetricFilter").values()
    assert metric_filter["Properties"]["LogGroupName"] == {"Ref": log_group_id}
    assert metric_filter["Properties"]["FilterPattern"] == FAILED_DEPLOYMENT_PATTERN
    (transformation,) = metric_filter["Properties"]["MetricTransformations"]
    alarms = _resources(session, name, "AWS::CloudWatch::Alarm").values()
    (alarm,) = [a["Properties"] for a in alarms if a["Properties"].get("MetricName") == "FailedDeployments"]
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        transformation["MetricNamespace"],
        transformation["MetricName"],
    )
    assert transformation["MetricValue"] == "1"
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum",
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]


@pytest.mark.parametrize("name", CPU)
def test_studio_users_can_approve_versions_of_the_group(session: Session, name: str) -> None:
    """Item 11: Studio's registry view approves with UpdateModelPackage; users read the run artifacts."""
    statements = _statements(session, name, "StudioUserRole")
    approve = next(s for s in statements if s.get("Sid") == "ReviewAndApproveVersions")
    assert "sagemaker:UpdateModelPackage" in approve["Action"]
    tails = [r["Fn::Join"][1][-1] for r in approve["Resource"]]
    assert tails == [f":model-package-group/{name}-models", f":model-package/{name}-models/*"]
    reads = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert reads and reads[0]["Resource"]["Fn::Join"][1][-1] == "/runs/*"
    assert any("kms:Decrypt" in _actions(s) and _is_project_key(s["Resource"]) for s in statements)


@pytest.mark.parametrize("name", CPU)
def test_studio_apps_reach_s3_through_the_gateway_endpoint(session: Session, name: str) -> None:
    """The S3 gateway endpoint routes to S3's public prefix list, outside the VPC CIDR: the Studio group's egress
    must allow HTTPS beyond the VPC, or reading run outputs from a notebook hangs on connect."""
    groups = _resources(session, name, "AWS::EC2::SecurityGroup")
    (studio,) = [g["Properties"] for k, g in groups.items() if k.startswith("StudioSecurityGroup")]
    https = [
        r
        for r in studio["SecurityGroupEgress"]
        if r["IpProtocol"] == "tcp" and r["FromPort"] == 443 and r["ToPort"] == 443
    ]
    assert [r.get("CidrIp") for r in https] == ["0.0.0.0/0"]


@pytest.mark.parametrize("name", MLOPS)
def test_requests_without_accept_are_answered_in_csv_like_the_baseline(session: Session, name: str) -> None:
    """Captured responses are compared with the CSV baseline (output column first): the serving container must
    answer text/csv, not its JSON default, when a caller sends no Accept header."""
    register = _steps(session, name)["Register"]["Arguments"]
    (container,) = register["InferenceSpecification"]["Containers"]
    assert container["Environment"]["SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT"] == "text/csv"
    assert register["InferenceSpecification"]["SupportedResponseMIMETypes"] == ["text/csv"]
