"""Intrinsics resolved across stacks, and pipeline-definition values, for `mlstack access`."""

from __future__ import annotations

import pytest

from mlstack.access.model import EXECUTION_ID, json_gets, pipeline_steps, pipeline_value
from mlstack.access.resolve import Stacks, UnresolvableError

NETWORK = {
    "Resources": {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {}}},
        "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/aws/lambda/fn"}},
    },
    "Outputs": {
        "KeyArn": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}, "Export": {"Name": "bp-key"}},
    },
}
APP = {
    "Parameters": {"Ami": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/aws/service/ami"}},
    "Resources": {
        "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
        "Named": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": {"Fn::Sub": "data-${AWS::AccountId}"}}},
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "alerts"}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
    },
}


@pytest.fixture
def stacks() -> Stacks:
    return Stacks({"bp-NetworkStack": NETWORK, "bp-App": APP}, "eu-west-1")


def test_refs_and_attributes_follow_each_type(stacks: Stacks) -> None:
    assert stacks.resolve("bp-App", {"Fn::GetAtt": ["Bucket", "Arn"]}) == "arn:aws:s3:::bp-app-bucket"
    assert stacks.resolve("bp-App", {"Ref": "Named"}) == "data-123456789012"
    assert stacks.resolve("bp-App", {"Fn::GetAtt": ["Role", "Arn"]}) == "arn:aws:iam::123456789012:role/Role"
    assert stacks.resolve("bp-App", {"Ref": "Topic"}) == "arn:aws:sns:eu-west-1:123456789012:alerts"
    assert stacks.resolve("bp-App", {"Ref": "Queue"}) == "https://sqs.eu-west-1.amazonaws.com/123456789012/Queue"
    assert stacks.resolve("bp-App", {"Ref": "Ami"}) == "Ami"  # an SSM parameter stays symbolic
    log_arn = stacks.resolve("bp-NetworkStack", {"Fn::GetAtt": ["Logs", "Arn"]})
    assert log_arn == "arn:aws:logs:eu-west-1:123456789012:log-group:/aws/lambda/fn:*"


def test_cross_stack_values(stacks: Stacks) -> None:
    key = "arn:aws:kms:eu-west-1:123456789012:key/Key"
    output = {"Fn::GetStackOutput": {"StackName": "bp-NetworkStack", "Region": "eu-west-1", "OutputName": "KeyArn"}}
    assert stacks.resolve("bp-App", output) == key
    assert stacks.resolve("bp-App", {"Fn::ImportValue": "bp-key"}) == key
    joined = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::", {"Ref": "Named"}, "/*"]]}
    assert stacks.resolve("bp-App", joined) == "arn:aws:s3:::data-123456789012/*"
    sub = {"Fn::Sub": ["${Arn}/runs/${!Literal}", {"Arn": {"Fn::GetAtt": ["Bucket", "Arn"]}}]}
    assert stacks.resolve("bp-App", sub) == "arn:aws:s3:::bp-app-bucket/runs/${Literal}"
    with pytest.raises(UnresolvableError):
        stacks.resolve("bp-App", {"Fn::ImportValue": "missing"})


def test_pipeline_values_for_one_execution() -> None:
    definition = {
        "Parameters": [{"Name": "Threshold", "DefaultValue": 0.8}],
        "Steps": [
            {
                "Name": "Evaluate",
                "Type": "Processing",
                "PropertyFiles": [{"PropertyFileName": "Report", "OutputName": "out", "FilePath": "r.json"}],
                "Arguments": {
                    "ProcessingOutputConfig": {
                        "Outputs": [
                            {
                                "OutputName": "out",
                                "S3Output": {
                                    "S3Uri": {
                                        "Std:Join": {
                                            "On": "/",
                                            "Values": ["s3://b/runs", {"Get": "Execution.PipelineExecutionId"}],
                                        }
                                    }
                                },
                            }
                        ]
                    }
                },
            },
            {
                "Name": "Check",
                "Type": "Condition",
                "Arguments": {
                    "Conditions": [
                        {
                            "LeftValue": {
                                "Std:JsonGet": {"PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.Report"}}
                            },
                            "RightValue": {"Get": "Parameters.Threshold"},
                        }
                    ],
                    "IfSteps": [{"Name": "Register", "Type": "RegisterModel", "Arguments": {}}],
                },
            },
        ],
    }
    steps = pipeline_steps(definition)
    assert set(steps) == {"Evaluate", "Check", "Register"}
    uri = {"Get": "Steps.Evaluate.ProcessingOutputConfig.Outputs['out'].S3Output.S3Uri"}
    assert pipeline_value(uri, steps, {}) == f"s3://b/runs/{EXECUTION_ID}"
    assert pipeline_value({"Get": "Parameters.Threshold"}, steps, {"Threshold": 0.8}) == 0.8
    assert json_gets(definition) == ["Steps.Evaluate.PropertyFiles.Report"]
