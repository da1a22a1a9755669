"""The pipeline definition builder: JSON shape, references, and one clear line for each bad definition."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstack.catalog.sagemaker_jobs import PROCESSING_INSTANCE_TYPES, check_instance
from mlstack.constructs.sagemaker.jobs import JobNetwork, ModelPackage, ProcessingJob, TrainingJob
from mlstack.constructs.sagemaker.pipeline_definition import (
    Condition,
    ConditionStep,
    Parameter,
    PipelineDefinition,
    PipelineDefinitionError,
    PropertyFile,
    Step,
)

ROLE = "arn:aws:iam::123456789012:role/jobs"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
PARAMS = [
    Parameter("ProcessingInstanceType", "String", "ml.m7i.xlarge"),
    Parameter("TrainingInstanceCount", "Integer", 1),
    Parameter("AccuracyThreshold", "Float", 0.8),
]
BY_NAME = {p.name: p for p in PARAMS}


def _processing(name: str, outputs: dict[str, tuple[str, Any]], **inputs: tuple[Any, str]) -> Step:
    job = ProcessingJob(
        image_uri=IMAGE,
        role_arn=ROLE,
        instance_type=BY_NAME["ProcessingInstanceType"].ref,
        code_uri=f"s3://code/{name}.py",
        code_file=f"{name}.py",
        inputs=inputs,
        outputs=outputs,
    )
    return Step(name, "Processing", job.arguments_json(BY_NAME))


def _pipeline() -> tuple[PipelineDefinition, dict[str, Step]]:
    pre = _processing("Preprocess", {"train": ("/opt/ml/processing/train", "s3://b/runs/train")})
    train = Step(
        "Train",
        "Training",
        TrainingJob(
            image_uri=IMAGE,
            role_arn=ROLE,
            instance_type="ml.m7i.xlarge",
            instance_count=BY_NAME["TrainingInstanceCount"].ref,
            code_uri="s3://code/train.py",
            code_file="train.py",
            channels={"train": pre.output_uri("train")},
            output_uri="s3://b/runs/model",
        ).arguments_json(BY_NAME),
    )
    evaluate = _processing(
        "Evaluate",
        {"evaluation": ("/opt/ml/processing/evaluation", "s3://b/runs/eval")},
        model=(train.prop("ModelArtifacts.S3ModelArtifacts"), "/opt/ml/processing/model"),
    )
    evaluate.property_files.append(PropertyFile("Evaluation", "evaluation", "evaluation.json"))
    register = Step(
        "Register",
        "RegisterModel",
        ModelPackage(
            group_name="churn-models", image_uri=IMAGE, model_data_url=train.prop("ModelArtifacts.S3ModelArtifacts")
        ).arguments_json(),
    )
    check = ConditionStep(
        "CheckAccuracy",
        conditions=[
            Condition(
                "GreaterThanOrEqualTo",
                evaluate.json_get("Evaluation", "metrics.accuracy.value"),
                BY_NAME["AccuracyThreshold"].ref,
            )
        ],
        if_steps=[register],
    )
    steps = {s.name: s for s in (pre, train, evaluate, register, check)}
    return PipelineDefinition(parameters=list(PARAMS), steps=[pre, train, evaluate, check]), steps


def test_definition_json_has_version_parameters_steps_condition_and_registration() -> None:
    definition, _ = _pipeline()
    doc = definition.to_json()
    assert doc["Version"] == "2020-12-01"
    assert set(doc) == {"Version", "Metadata", "Parameters", "Steps"}  # the public schema allows nothing else
    assert doc["Parameters"][1] == {"Name": "TrainingInstanceCount", "Type": "Integer", "DefaultValue": 1}
    assert [s["Name"] for s in doc["Steps"]] == ["Preprocess", "Train", "Evaluate", "CheckAccuracy"]
    train = doc["Steps"][1]["Arguments"]
    assert train["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == {
        "Get": "Steps.Preprocess.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"
    }
    assert train["ResourceConfig"]["InstanceCount"] == {"Get": "Parameters.TrainingInstanceCount"}
    evaluate = doc["Steps"][2]
    assert evaluate["PropertyFiles"] == [
        {"PropertyFileName": "Evaluation", "OutputName": "evaluation", "FilePath": "evaluation.json"}
    ]
    condition = doc["Steps"][3]["Arguments"]
    assert condition["Conditions"] == [
        {
            "Type": "GreaterThanOrEqualTo",
            "LeftValue": {
                "Std:JsonGet": {
                    "PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.Evaluation"},
                    "Path": "metrics.accuracy.value",
                }
            },
            "RightValue": {"Get": "Parameters.AccuracyThreshold"},
        }
    ]
    (register,) = condition["IfSteps"]
    assert register["Type"] == "RegisterModel"
    assert register["Arguments"]["ModelApprovalStatus"] == "PendingManualApproval"
    assert register["Arguments"]["ModelPackageGroupName"] == "churn-models"
    assert condition["ElseSteps"] == []
    assert len(json.dumps(doc)) < 1_048_576


def test_processing_step_runs_its_script_from_the_code_input() -> None:
    _, steps = _pipeline()
    args = steps["Preprocess"].arguments
    assert args["AppSpecification"]["ContainerEntrypoint"] == ["python3", "/opt/ml/processing/input/code/Preprocess.py"]
    assert args["ProcessingInputs"][0]["S3Input"]["LocalPath"] == "/opt/ml/processing/input/code"


def _one_line(err: pytest.ExceptionInfo[PipelineDefinitionError]) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_duplicate_step_name_is_one_line() -> None:
    definition, steps = _pipeline()
    definition.steps.append(Step("Train", "Training", steps["Train"].arguments))
    with pytest.raises(PipelineDefinitionError) as err:
        definition.to_json()
    assert _one_line(err) == "step 'Train': duplicate step name; every step needs its own name"


def test_nested_step_names_share_the_namespace() -> None:
    definition, steps = _pipeline()
    definition.steps.append(Step("Register", "Processing", steps["Preprocess"].arguments))
    assert "step 'Register': duplicate step name" in definition.validate()[0]


def test_dangling_step_reference_is_one_line() -> None:
    definition, steps = _pipeline()
    steps["Train"].arguments["OutputDataConfig"]["S3OutputPath"] = {"Get": "Steps.Prepare.ProcessingJobName"}
    with pytest.raises(PipelineDefinitionError) as err:
        definition.to_json()
    assert _one_line(err) == (
        "step 'Train': Steps.Prepare.ProcessingJobName refers to step 'Prepare', which is not in this pipeline"
    )


def test_unknown_property_is_one_line() -> None:
    definition, steps = _pipeline()
    steps["Evaluate"].arguments["ProcessingInputs"][1]["S3Input"]["S3Uri"] = steps["Train"].prop("ModelArtifact")
    with pytest.raises(PipelineDefinitionError) as err:
        definition.to_json()
    assert _one_line(err).startswith(
        "step 'Evaluate': Steps.Train.ModelArtifact: 'ModelArtifact' is not a property of a Training step (known:"
    )


def test_output_name_that_the_processing_step_does_not_have() -> None:
    definition, steps = _pipeline()
    steps["Train"].arguments["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] = steps[
        "Preprocess"
    ].output_uri("training")
    assert definition.validate() == [
        "step 'Train': Steps.Preprocess.ProcessingOutputConfig.Outputs['training'].S3Output.S3Uri: step "
        "'Preprocess' has no output 'training' (outputs: ['train'])"
    ]


def test_json_get_on_an_undeclared_property_file() -> None:
    definition, steps = _pipeline()
    steps["Evaluate"].property_files.clear()
    assert definition.validate() == [
        "step 'CheckAccuracy': Steps.Evaluate.PropertyFiles.Evaluation: step 'Evaluate' declares no such property "
        "file (has: none)"
    ]


def test_unknown_parameter_and_wrongly_typed_parameter() -> None:
    definition, steps = _pipeline()
    steps["Train"].arguments["ResourceConfig"]["VolumeSizeInGB"] = {"Get": "Parameters.AccuracyThreshold"}
    steps["Train"].arguments["OutputDataConfig"]["S3OutputPath"] = {"Get": "Parameters.OutputPath"}
    assert definition.validate() == [
        "step 'Train': Parameters.OutputPath is not a parameter of this pipeline (parameters: "
        "ProcessingInstanceType, TrainingInstanceCount, AccuracyThreshold)",
        "step 'Train': VolumeSizeInGB takes an integer but Parameters.AccuracyThreshold is a Float parameter; "
        "make it Integer",
    ]


def test_parameter_default_must_match_its_type() -> None:
    definition = PipelineDefinition(parameters=[Parameter("Count", "Integer", "2")], steps=[])
    assert definition.validate() == ["parameter 'Count': default '2' is not a Integer; give a Integer default"]
    assert PipelineDefinition([Parameter("Flag", "Integer", True)], []).validate()[0].startswith("parameter 'Flag'")


def test_depends_on_missing_step_and_cycles() -> None:
    definition, steps = _pipeline()
    steps["Preprocess"].depends_on.append("Evaluate")
    (cycle,) = definition.validate()
    assert cycle.endswith(": dependency cycle; remove one DependsOn or reference")
    assert cycle.startswith("steps Preprocess -> Evaluate -> ")
    steps["Preprocess"].depends_on[:] = ["Nope"]
    assert definition.validate() == ["step 'Preprocess': DependsOn 'Nope' is not a step of this pipeline"]


def test_bad_step_name() -> None:
    definition = PipelineDefinition([], [Step("train step", "Training", {})])
    assert definition.validate() == [
        r"step 'train step': name must match ^[A-Za-z0-9\-_]{1,64}$ (letters, digits, - and _)"
    ]


# ---- instance types and distributed training -------------------------------------------------------------------


def _training(**overrides: Any) -> TrainingJob:
    props: dict[str, Any] = {
        "image_uri": IMAGE,
        "role_arn": ROLE,
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "code_uri": "s3://c/train.py",
        "code_file": "train.py",
        "channels": {"train": "s3://b/train/"},
        "output_uri": "s3://b/model",
        "distribution": "torchrun",
        "network": JobNetwork(["subnet-1"], ["sg-1"]),
        "checkpoint_uri": "s3://b/checkpoints",
    }
    props.update(overrides)
    return TrainingJob(**props)


def test_distributed_training_step_has_efa_vpc_checkpoints_spot_and_runtime() -> None:
    args = _training(spot=True, max_runtime_seconds=7200, max_wait_seconds=10800).arguments_json({})
    assert args["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge"
    assert args["ResourceConfig"]["InstanceCount"] == 2
    assert args["VpcConfig"] == {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}
    assert args["CheckpointConfig"] == {"S3Uri": "s3://b/checkpoints", "LocalPath": "/opt/ml/checkpoints"}
    assert args["EnableManagedSpotTraining"] is True
    assert args["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 10800}
    hyper = args["HyperParameters"]
    assert hyper["sagemaker_torch_distributed_enabled"] == "true"
    assert hyper["sagemaker_program"] == '"train.py"'
    assert hyper["sagemaker_submit_directory"] == '"/opt/ml/input/data/code"'
    assert args["InputDataConfig"][0]["ChannelName"] == "code"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"instance_type": "ml.g5.2xlarge"},
            "training instance 'ml.g5.2xlarge': multi-instance torchrun needs an EFA type "
            "(ml.p4d.24xlarge, ml.p5.48xlarge, ml.trn1.32xlarge); use one instance or an EFA type",
        ),
        (
            {"network": JobNetwork(["subnet-1", "subnet-2"], ["sg-1"])},
            "training on 2 x ml.p5.48xlarge: EFA training runs in one subnet (one AZ); give exactly one",
        ),
        (
            {"spot": True, "checkpoint_uri": None, "max_wait_seconds": 7200},
            "training with managed Spot on more than one instance needs checkpoint_uri: an interruption otherwise "
            "restarts the whole run",
        ),
        (
            {"spot": True, "max_wait_seconds": 60},
            "training with managed Spot: max_wait_seconds (60) must be at least max_runtime_seconds (3600)",
        ),
        ({"max_wait_seconds": 7200}, "training: max_wait_seconds is for managed Spot only; set spot or drop it"),
        (
            {"max_runtime_seconds": 30 * 24 * 3600},
            "training max runtime 2592000s: must be 1..2419200 (28 days)",
        ),
        (
            {"instance_type": "ml.inf2.xlarge", "instance_count": 1},
            "training instance 'ml.inf2.xlarge': SageMaker does not offer it for training jobs; pick another type",
        ),
    ],
)
def test_bad_training_step_is_one_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(PipelineDefinitionError) as err:
        _training(**overrides).arguments_json({})
    assert _one_line(err) == message


def test_single_instance_spot_needs_no_checkpoints() -> None:
    args = _training(instance_count=1, spot=True, checkpoint_uri=None, max_wait_seconds=3600).arguments_json({})
    assert args["EnableManagedSpotTraining"] is True
    assert "CheckpointConfig" not in args


def test_instance_type_from_a_parameter_default_is_checked() -> None:
    params = {"T": Parameter("T", "String", "ml.inf2.xlarge")}
    job = ProcessingJob(image_uri=IMAGE, role_arn=ROLE, instance_type=params["T"].ref, code_uri="s3://c", code_file="x")
    with pytest.raises(PipelineDefinitionError) as err:
        job.arguments_json(params)
    assert _one_line(err) == (
        "processing instance 'ml.inf2.xlarge': SageMaker does not offer it for processing jobs; pick another type"
    )


def test_instance_checks() -> None:
    assert check_instance("training", "ml.p4d.24xlarge") is None
    assert check_instance("processing", "ml.m7i.xlarge") is None
    assert check_instance("training", "p4d.24xlarge") == (
        "training instance 'p4d.24xlarge': SageMaker jobs take ml.* types (e.g. ml.p4d.24xlarge)"
    )
    unknown = check_instance("training", "ml.x9.huge")
    assert unknown is not None and unknown.startswith("training instance 'ml.x9.huge': ") and "\n" not in unknown


def test_processing_types_are_the_ones_botocore_lists() -> None:
    """The offline list matches the SageMaker API model this project pins (botocore's ProcessingInstanceType)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    offered = set(model.shape_for("ProcessingInstanceType").enum)
    from mlstack.catalog import all_instances

    catalog = {f"ml.{it.name}" for it in all_instances()}
    assert catalog & offered == set(PROCESSING_INSTANCE_TYPES)
