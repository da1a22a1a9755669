"""The MLOps constructs in a plain CDK Stack (no blueprint file): what a team gets from its own app."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from mlstack.constructs.sagemaker import ApprovalDeploy, MlopsPipeline, PipelineDefinitionError, TrainingSettings

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
MONITOR = "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer:latest"


def _stack() -> tuple[Stack, ec2.Vpc, kms.Key, s3.Bucket]:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Team", env=Environment(region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Bucket", encryption_key=key)
    return stack, vpc, key, bucket


def test_pipeline_and_approval_deploy_in_a_plain_stack() -> None:
    stack, vpc, key, bucket = _stack()
    pipeline = MlopsPipeline(
        stack,
        "Pipeline",
        artifacts_bucket=bucket,
        key=key,
        model_package_group_name="team-models",
        pipeline_name="team-pipeline",
        training_image=IMAGE,
        processing_image=IMAGE,
        monitor_image=MONITOR,
        vpc=vpc,
        subnets=vpc.isolated_subnets,
    )
    ApprovalDeploy(
        stack,
        "Deploy",
        model_package_group_name="team-models",
        endpoint_name="team-serving",
        artifacts_bucket=bucket,
        key=key,
        vpc=vpc,
        subnets=vpc.isolated_subnets,
        instance_type="ml.m7i.large",
        monitor_image=MONITOR,
    )
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::SageMaker::Pipeline",
        {
            "PipelineName": "team-pipeline",
            "RoleArn": {"Fn::GetAtt": [Match.string_like_regexp("PipelinePipelineRole"), "Arn"]},
        },
    )
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "detail": {"ModelPackageGroupName": ["team-models"], "ModelApprovalStatus": ["Approved", "Rejected"]}
            }
        },
    )
    template.resource_count_is("AWS::Lambda::Function", 1)
    # No alarm topic given: no alarms, no notification rules (a team wires its own).
    template.resource_count_is("AWS::CloudWatch::Alarm", 0)
    template.resource_count_is("AWS::Events::Rule", 2)
    doc = pipeline.definition.to_json()
    assert [s["Name"] for s in doc["Steps"]] == ["Preprocess", "Train", "Evaluate", "Baseline", "CheckAccuracy"]
    assert json.dumps(doc).count("PendingManualApproval") == 1


def test_bad_training_settings_fail_at_construction_with_one_line() -> None:
    stack, vpc, key, bucket = _stack()
    with pytest.raises(PipelineDefinitionError, match=r"^training instance 'ml\.g6\.xlarge': multi-instance torchrun"):
        MlopsPipeline(
            stack,
            "Pipeline",
            artifacts_bucket=bucket,
            key=key,
            model_package_group_name="g",
            pipeline_name="p",
            training_image=IMAGE,
            processing_image=IMAGE,
            monitor_image=MONITOR,
            vpc=vpc,
            subnets=vpc.isolated_subnets,
            training=TrainingSettings(instance_type="ml.g6.xlarge", instance_count=2, distribution="torchrun"),
        )


def test_local_nvme_jobs_take_no_volume_key_and_training_no_volume_size() -> None:
    from mlstack.constructs.sagemaker import ProcessingJob, TrainingJob

    key = "arn:aws:kms:us-east-1:111122223333:key/k"
    common: dict[str, Any] = {
        "image_uri": IMAGE,
        "role_arn": "r",
        "code_uri": "s3://b/c.py",
        "code_file": "c.py",
        "kms_key_id": key,
    }
    training = TrainingJob(instance_type="ml.p4d.24xlarge", channels={}, output_uri="s3://b/o", **common)
    assert training.arguments_json({})["ResourceConfig"] == {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1}
    ebs = TrainingJob(instance_type="ml.m7i.xlarge", channels={}, output_uri="s3://b/o", **common)
    assert ebs.arguments_json({})["ResourceConfig"]["VolumeKmsKeyId"] == key
    with pytest.raises(PipelineDefinitionError, match=r"^training volume_size_gb on ml\.p4d\.24xlarge: .*remove"):
        TrainingJob(
            instance_type="ml.p4d.24xlarge", channels={}, output_uri="s3://b/o", volume_size_gb=500, **common
        ).arguments_json({})
    processing = ProcessingJob(instance_type="ml.g5.xlarge", **common).arguments_json({})
    cluster = processing["ProcessingResources"]["ClusterConfig"]
    assert "VolumeKmsKeyId" not in cluster and cluster["VolumeSizeInGB"] == 30  # required; within the 250 GB NVMe
    with pytest.raises(PipelineDefinitionError, match=r"^processing volume 300 GB on ml\.g5\.xlarge: above"):
        ProcessingJob(instance_type="ml.g5.xlarge", volume_size_gb=300, **common).arguments_json({})


def test_a_deploy_that_changes_the_serving_or_monitoring_settings_runs_the_reconcile_once() -> None:
    """The custom resource's properties are the settings the handler hashes into its names (plus the schedule), so
    CloudFormation sends Update, to the function, exactly when one of them changes."""
    from mlstack.constructs.sagemaker.approval_deploy import RECONCILE_SETTINGS
    from runtime.approval_deploy import handler

    assert set(RECONCILE_SETTINGS) == {*handler.SERVING_SETTINGS, *handler.MONITOR_SETTINGS, "MONITOR_SCHEDULE"}
    templates = []
    for instance_type in ("ml.m7i.large", "ml.m7i.xlarge"):
        stack, vpc, key, bucket = _stack()
        deploy = ApprovalDeploy(
            stack,
            "Deploy",
            model_package_group_name="team-models",
            endpoint_name="team-serving",
            artifacts_bucket=bucket,
            key=key,
            vpc=vpc,
            subnets=vpc.isolated_subnets,
            instance_type=instance_type,
            monitor_image=MONITOR,
        )
        template = Template.from_stack(stack)
        function = stack.get_logical_id(deploy.function.node.default_child)  # type: ignore[arg-type]
        [(logical_id, resource)] = template.find_resources("Custom::EndpointReconcile").items()
        assert resource["Properties"]["ServiceToken"] == {"Fn::GetAtt": [function, "Arn"]}
        assert resource["Properties"]["ServiceTimeout"] == "300"
        assert resource["Properties"]["INSTANCE_TYPE"] == instance_type
        environment = template.find_resources("AWS::Lambda::Function")[function]["Properties"]["Environment"]
        assert {k: v for k, v in resource["Properties"].items() if k in RECONCILE_SETTINGS} == {
            k: environment["Variables"][k] for k in RECONCILE_SETTINGS
        }
        templates.append(logical_id)
    assert templates[0] == templates[1]  # same resource, new properties: an Update, not a replacement
