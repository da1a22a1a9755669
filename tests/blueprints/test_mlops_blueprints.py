"""MLOps blueprints, from the session synth: the pipeline JSON, training settings, roles, approval rules, Studio."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import selected_blueprints
from tests.synth import Session

MLOPS = [name for name in selected_blueprints() if name.startswith("mlops-")]
CPU = ["mlops-pipeline"] if "mlops-pipeline" in MLOPS else []
EFA = ["mlops-efa-training"] if "mlops-efa-training" in MLOPS else []


def _template(session: Session, name: str) -> dict[str, Any]:
    return session.blueprints[name].templates["MlopsStack"]


def _of_type(session: Session, name: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in _template(session, name)["Resources"].items() if v["Type"] == kind}


def _definition(session: Session, name: str) -> dict[str, Any]:
    """The pipeline definition with every CloudFormation token replaced by "<token>" (tokens sit in strings)."""
    (pipeline,) = _of_type(session, name, "AWS::SageMaker::Pipeline").values()
    body = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    definition: dict[str, Any] = json.loads("".join(p if isinstance(p, str) else "<token>" for p in parts))
    return definition


def _steps(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    steps = {s["Name"]: s for s in definition["Steps"]}
    for step in definition["Steps"]:
        if step["Type"] == "Condition":
            steps.update({s["Name"]: s for s in step["Arguments"]["IfSteps"] + step["Arguments"]["ElseSteps"]})
    return steps


def _policy_statements(session: Session, name: str, role_prefix: str) -> list[dict[str, Any]]:
    policies = _of_type(session, name, "AWS::IAM::Policy")
    (policy,) = [p for p in policies.values() if p["Properties"]["Roles"][0]["Ref"].startswith(role_prefix)]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


@pytest.mark.parametrize("name", MLOPS)
def test_pipeline_steps_dependencies_condition_and_registration(session: Session, name: str) -> None:
    definition = _definition(session, name)
    assert definition["Version"] == "2020-12-01"
    assert [p["Name"] for p in definition["Parameters"]] == [
        "ProcessingInstanceType",
        "TrainingInstanceType",
        "TrainingInstanceCount",
        "AccuracyThreshold",
    ]
    steps = _steps(definition)
    assert {n: s["Type"] for n, s in steps.items()} == {
        "Preprocess": "Processing",
        "Train": "Training",
        "Evaluate": "Processing",
        "Baseline": "Processing",
        "CheckAccuracy": "Condition",
        "Register": "RegisterModel",
    }
    # Data dependencies are property references: Train reads Preprocess's outputs, Evaluate Train's model.
    channels = {c["ChannelName"]: c for c in steps["Train"]["Arguments"]["InputDataConfig"]}
    assert channels["train"]["DataSource"]["S3DataSource"]["S3Uri"] == {
        "Get": "Steps.Preprocess.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"
    }
    inputs = {i["InputName"]: i for i in steps["Evaluate"]["Arguments"]["ProcessingInputs"]}
    assert inputs["model"]["S3Input"]["S3Uri"] == {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"}
    assert steps["Evaluate"]["PropertyFiles"] == [
        {"PropertyFileName": "Evaluation", "OutputName": "evaluation", "FilePath": "evaluation.json"}
    ]
    (condition,) = steps["CheckAccuracy"]["Arguments"]["Conditions"]
    assert condition["LeftValue"]["Std:JsonGet"]["Path"] == "metrics.accuracy.value"
    assert condition["RightValue"] == {"Get": "Parameters.AccuracyThreshold"}
    register = steps["Register"]["Arguments"]
    assert register["ModelPackageGroupName"] == f"{name}-models"
    assert register["ModelApprovalStatus"] == "PendingManualApproval"
    baseline = register["DriftCheckBaselines"]["ModelDataQuality"]
    assert baseline["Constraints"]["S3Uri"]["Std:Join"]["Values"] == [
        {"Get": "Steps.Baseline.ProcessingOutputConfig.Outputs['baseline'].S3Output.S3Uri"},
        "constraints.json",
    ]
    # Every job runs in the VPC with the project key on its volume and outputs.
    for step in ("Preprocess", "Evaluate", "Baseline"):
        args = steps[step]["Arguments"]
        assert args["NetworkConfig"]["VpcConfig"]["Subnets"], step
        assert args["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == "<token>", step
    assert steps["Train"]["Arguments"]["OutputDataConfig"]["KmsKeyId"] == "<token>"


@pytest.mark.parametrize("name", CPU)
def test_cpu_pipeline_trains_on_one_instance_without_spot(session: Session, name: str) -> None:
    train = _steps(_definition(session, name))["Train"]["Arguments"]
    assert train["ResourceConfig"]["InstanceType"] == {"Get": "Parameters.TrainingInstanceType"}
    assert train["ResourceConfig"]["InstanceCount"] == 1
    assert "EnableManagedSpotTraining" not in train
    assert "sagemaker_torch_distributed_enabled" not in train["HyperParameters"]
    assert len(train["VpcConfig"]["Subnets"]) == 2


@pytest.mark.parametrize("name", EFA)
def test_efa_training_step_is_multi_instance_torchrun_in_one_subnet_with_spot_and_checkpoints(
    session: Session, name: str
) -> None:
    definition = _definition(session, name)
    params = {p["Name"]: p["DefaultValue"] for p in definition["Parameters"]}
    assert params["TrainingInstanceType"] == "ml.p4d.24xlarge"
    assert params["TrainingInstanceCount"] == 2
    train = _steps(definition)["Train"]["Arguments"]
    assert train["ResourceConfig"]["InstanceCount"] == {"Get": "Parameters.TrainingInstanceCount"}
    assert train["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    assert len(train["VpcConfig"]["Subnets"]) == 1
    assert train["EnableManagedSpotTraining"] is True
    assert train["StoppingCondition"] == {"MaxRuntimeInSeconds": 8 * 3600, "MaxWaitTimeInSeconds": 12 * 3600}
    assert train["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    # The job security group admits itself (all traffic: EFA and NCCL), and egress only to itself and HTTPS.
    ingress = _of_type(session, name, "AWS::EC2::SecurityGroupIngress")
    (self_rule,) = [r["Properties"] for k, r in ingress.items() if k.startswith("PipelineJobSecurityGroup")]
    assert self_rule["IpProtocol"] == "-1"
    assert self_rule["SourceSecurityGroupId"] == self_rule["GroupId"]


@pytest.mark.parametrize("name", MLOPS)
def test_roles_are_scoped(session: Session, name: str) -> None:
    roles = _of_type(session, name, "AWS::IAM::Role")
    for role in roles.values():
        assert "ManagedPolicyArns" not in role["Properties"]  # no *FullAccess or any managed policy
    for policy in _of_type(session, name, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            wild = [a for a in actions if "*" in a]
            # CDK's KMS grants only (kms:GenerateDataKey*, kms:ReEncrypt*), on the project key.
            assert all(a.startswith("kms:") for a in wild), wild
    pipeline = _policy_statements(session, name, "PipelinePipelineRole")
    run_jobs = next(s for s in pipeline if s.get("Sid") == "RunJobs")
    assert "sagemaker:CreateTrainingJob" in run_jobs["Action"]
    assert all(
        ":training-job/pipelines-*" in json.dumps(r) or ":processing-job/pipelines-*" in json.dumps(r)
        for r in run_jobs["Resource"]
    )
    passes = [s for s in pipeline if s["Action"] == "iam:PassRole"]
    assert [p["Resource"]["Fn::GetAtt"][0] for p in passes] == [
        next(k for k in _of_type(session, name, "AWS::IAM::Role") if k.startswith("PipelineJobRole"))
    ]
    jobs = _policy_statements(session, name, "PipelineJobRole")
    writes = next(s for s in jobs if s.get("Sid") == "RunPrefix")
    assert writes["Resource"]["Fn::Join"][1][-1] == "/runs/*"
    enis = next(s for s in jobs if s.get("Sid") == "EnisInThisVpc")
    assert "ec2:Vpc" in enis["Condition"]["ArnEquals"]
    model = _policy_statements(session, name, "ApprovalDeployModelRole")
    puts = [s["Resource"]["Fn::Join"][1][-1] for s in model if s["Action"] == "s3:PutObject"]
    assert puts == ["/capture/*"]  # data capture is written with the model's role; nothing else
    deploy = _policy_statements(session, name, "ApprovalDeployFunctionRole")
    endpoint = next(s for s in deploy if s.get("Sid") == "Endpoint")
    assert json.dumps(endpoint["Resource"]).count(f":endpoint/{name}-serving") == 1


@pytest.mark.parametrize("name", MLOPS)
def test_approval_and_in_service_rules_target_the_deploy_function(session: Session, name: str) -> None:
    rules = {k: v["Properties"] for k, v in _of_type(session, name, "AWS::Events::Rule").items()}
    approval = next(v for k, v in rules.items() if k.startswith("ApprovalDeployApprovalRule"))
    assert approval["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Model Package State Change"],
        "detail": {"ModelPackageGroupName": [f"{name}-models"], "ModelApprovalStatus": ["Approved", "Rejected"]},
    }
    in_service = next(v for k, v in rules.items() if k.startswith("ApprovalDeployInServiceRule"))
    assert in_service["EventPattern"]["detail"] == {
        "EndpointName": [f"{name}-serving"],
        "EndpointStatus": ["IN_SERVICE"],
    }
    (function_id,) = _of_type(session, name, "AWS::Lambda::Function")
    for rule in (approval, in_service):
        (target,) = rule["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 4
    function = _of_type(session, name, "AWS::Lambda::Function")[function_id]["Properties"]
    assert "ReservedConcurrentExecutions" not in function  # fails in new accounts; the handler reconciles instead
    assert function["Environment"]["Variables"]["ENDPOINT_NAME"] == f"{name}-serving"
    # No endpoint in the template: the first approval creates it; the schedule follows it into service.
    assert _of_type(session, name, "AWS::SageMaker::Endpoint") == {}
    assert _of_type(session, name, "AWS::SageMaker::MonitoringSchedule") == {}


@pytest.mark.parametrize("name", EFA)
def test_gpu_serving_host_with_nvme_gets_no_volume_key(session: Session, name: str) -> None:
    (function,) = _of_type(session, name, "AWS::Lambda::Function").values()
    assert function["Properties"]["Environment"]["Variables"]["VOLUME_KMS"] == "false"


@pytest.mark.parametrize("name", CPU)
def test_studio_domain_is_vpc_only_with_iam_auth_and_the_blueprint_users(session: Session, name: str) -> None:
    (domain,) = _of_type(session, name, "AWS::SageMaker::Domain").values()
    assert domain["Properties"]["AppNetworkAccessType"] == "VpcOnly"
    assert domain["Properties"]["AuthMode"] == "IAM"
    assert domain["Properties"]["KmsKeyId"]
    assert domain["DeletionPolicy"] == "RetainExceptOnCreate"
    profiles = _of_type(session, name, "AWS::SageMaker::UserProfile").values()
    assert [p["Properties"]["UserProfileName"] for p in profiles] == ["data-scientist"]
    groups = _of_type(session, name, "AWS::EC2::SecurityGroup")
    (studio_sg,) = [g for k, g in groups.items() if k.startswith("StudioSecurityGroup")]
    assert studio_sg["DeletionPolicy"] == "RetainExceptOnCreate"  # a retained domain still uses it


@pytest.mark.parametrize("name", EFA)
def test_studio_is_optional(session: Session, name: str) -> None:
    assert _of_type(session, name, "AWS::SageMaker::Domain") == {}


@pytest.mark.parametrize("name", MLOPS)
def test_scripts_ship_as_assets_uploaded_before_the_stack(session: Session, name: str) -> None:
    """`cdk deploy` publishes file assets before it deploys the stack, so the scripts exist before any run."""
    steps = _steps(_definition(session, name))
    code = steps["Preprocess"]["Arguments"]["ProcessingInputs"][0]
    assert code["InputName"] == "code"
    assert code["S3Input"]["S3Uri"] == "<token>"  # Fn::Sub of the bootstrap asset bucket
    entry = steps["Preprocess"]["Arguments"]["AppSpecification"]["ContainerEntrypoint"]
    assert entry[0] == "python3" and entry[1].startswith("/opt/ml/processing/input/code/") and entry[1].endswith(".py")
