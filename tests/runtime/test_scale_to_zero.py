"""runtime/scale_to_zero/handler.py: on a Capacity Block expiration warning, the node groups on the block go to
zero (moto's EKS) and the Batch queue's jobs are terminated and its compute environment disabled (moto's Batch
for the environment, botocore's Stubber for the jobs: moto runs Batch jobs in Docker, absent here)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.model import ListShape, MapShape, Shape, StructureShape
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from moto import mock_aws

from runtime.scale_to_zero import handler

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/nodes"
EVENT = {
    "source": "aws.ec2",
    "detail-type": "Capacity Block Expiration Warning",
    "detail": {"capacity-reservation-id": "cr-0123456789abcdef0", "end-date": "2026-12-01T11:30:00Z"},
}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def test_node_groups_on_the_block_go_to_zero_and_keep_their_max(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(name="demo-cluster", roleArn=ROLE, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    for name in ("p5", "system"):
        eks.create_nodegroup(
            clusterName="demo-cluster",
            nodegroupName=name,
            nodeRole=ROLE,
            subnets=["subnet-1"],
            scalingConfig={"minSize": 2, "maxSize": 4, "desiredSize": 2},
        )
    monkeypatch.setenv("CLUSTER_NAME", "demo-cluster")
    monkeypatch.setenv("NODEGROUPS", json.dumps(["p5"]))
    result = handler.handler(EVENT)
    assert result == {"done": ["nodegroup p5: 0 nodes"]}
    scaling = {
        n: eks.describe_nodegroup(clusterName="demo-cluster", nodegroupName=n)["nodegroup"]["scalingConfig"]
        for n in ("p5", "system")
    }
    assert scaling == {
        "p5": {"minSize": 0, "maxSize": 4, "desiredSize": 0},
        "system": {"minSize": 2, "maxSize": 4, "desiredSize": 2},
    }


def test_batch_compute_environment_is_disabled(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = boto3.client("batch", region_name=REGION)
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="batch", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = batch.create_compute_environment(
        computeEnvironmentName="train", type="UNMANAGED", state="ENABLED", serviceRole=role
    )
    queue = batch.create_job_queue(
        jobQueueName="train",
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}],
    )
    monkeypatch.setenv("JOB_QUEUES", json.dumps([queue["jobQueueArn"]]))
    monkeypatch.setenv("COMPUTE_ENVIRONMENTS", json.dumps([env["computeEnvironmentArn"]]))
    assert handler.handler(EVENT) == {"done": [f"compute environment {env['computeEnvironmentArn']}: disabled"]}
    (described,) = batch.describe_compute_environments(computeEnvironments=[env["computeEnvironmentArn"]])[
        "computeEnvironments"
    ]
    assert described["state"] == "DISABLED"


def test_batch_jobs_of_every_live_state_are_terminated(monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("batch", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stubber = Stubber(client)
    queue = "arn:aws:batch:us-east-1:123456789012:job-queue/train"
    for state in handler.BATCH_STATES:
        jobs = [{"jobId": "job-1", "jobName": "run1"}] if state == "RUNNING" else []
        stubber.add_response("list_jobs", {"jobSummaryList": jobs}, {"jobQueue": queue, "jobStatus": state})
    stubber.add_response(
        "terminate_job", {}, {"jobId": "job-1", "reason": "mlstack: Capacity Block cr-0123456789abcdef0 expiring"}
    )
    created: list[str] = []

    def fake_client(service: str, **_: Any) -> Any:
        created.append(service)
        return client

    monkeypatch.setattr(boto3, "client", fake_client)
    monkeypatch.setenv("JOB_QUEUES", json.dumps([queue]))
    with stubber:
        assert handler.handler(EVENT) == {"done": ["job job-1: terminated"]}
    stubber.assert_no_pending_responses()
    assert created == ["batch"]


def test_bad_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGROUPS", '"p5"')
    with pytest.raises(RuntimeError, match="EKS node groups FAILED: ValueError: NODEGROUPS must be a JSON list"):
        handler.handler(EVENT)


def test_budget_notification_scales_and_tells_the_alarm_topic(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(name="demo-cluster", roleArn=ROLE, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    eks.create_nodegroup(
        clusterName="demo-cluster",
        nodegroupName="g6e",
        nodeRole=ROLE,
        subnets=["subnet-1"],
        scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": 2},
    )
    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    monkeypatch.setenv("CLUSTER_NAME", "demo-cluster")
    monkeypatch.setenv("NODEGROUPS", json.dumps(["g6e"]))
    monkeypatch.setenv("NOTIFY_TOPIC_ARN", topic)
    event = {"Records": [{"Sns": {"Subject": "AWS Budgets: demo has exceeded your alert threshold", "Message": "..."}}]}
    assert handler.handler(event) == {"done": ["nodegroup g6e: 0 nodes"]}
    scaling = eks.describe_nodegroup(clusterName="demo-cluster", nodegroupName="g6e")["nodegroup"]["scalingConfig"]
    assert (scaling["minSize"], scaling["desiredSize"]) == (0, 0)
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    body = json.loads(message["Body"])
    assert body["Subject"] == "mlstack: training capacity scaled to zero"
    assert body["Message"] == "AWS Budgets: demo has exceeded your alert threshold: nodegroup g6e: 0 nodes"


def _hyperpod_group(name: str, kind: str, count: int, **extra: Any) -> dict[str, Any]:
    """A DescribeCluster instance group as HyperPod returns it (API Reference, ClusterInstanceGroupDetails)."""
    return {
        "InstanceGroupName": name,
        "InstanceType": kind,
        "CurrentCount": count,
        "TargetCount": count,
        "LifeCycleConfig": {"SourceS3Uri": "s3://scripts/lifecycle/", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod-nodes",
        "ThreadsPerCore": 1,
        "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
        "Status": "InService",
        "CurrentImageId": "default",
        "DesiredImageId": "default",
        **extra,
    }


def test_hyperpod_accelerated_groups_go_to_zero_and_every_other_group_keeps_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto has no UpdateCluster: botocore's Stubber checks the request against the SageMaker API model (an
    # InstanceCount of 0 is inside its range, 0..6758) and the handler's shape against what the test expects.
    client = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stubber = Stubber(client)
    controller = _hyperpod_group("controller-machine", "ml.m5.2xlarge", 1, SlurmConfig={"NodeType": "Controller"})
    workers = _hyperpod_group("p5", "ml.p5.48xlarge", 4, OnStartDeepHealthChecks=["InstanceStress"], MinCount=2)
    described = {
        "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc123",
        "ClusterName": "demo",
        "ClusterStatus": "InService",
        "InstanceGroups": [controller, workers],
        "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
    }
    stubber.add_response("describe_cluster", described, {"ClusterName": "demo"})
    dropped = {"CurrentCount", "TargetCount", "Status", "CurrentImageId", "DesiredImageId"}
    # No ImageId: "default" is the HyperPod-managed image, which a request without ImageId keeps.
    kept = {**{k: v for k, v in controller.items() if k not in dropped}, "InstanceCount": 1}
    expected = [
        kept,
        {
            "InstanceGroupName": "p5",
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 0,
            "MinInstanceCount": 0,
            "LifeCycleConfig": workers["LifeCycleConfig"],
            "ExecutionRole": workers["ExecutionRole"],
            "ThreadsPerCore": 1,
            "InstanceStorageConfigs": workers["InstanceStorageConfigs"],
            "OnStartDeepHealthChecks": ["InstanceStress"],
        },
    ]
    stubber.add_response(
        "update_cluster", {"ClusterArn": described["ClusterArn"]}, {"ClusterName": "demo", "InstanceGroups": expected}
    )
    monkeypatch.setattr(boto3, "client", lambda service, **_: client)
    monkeypatch.setenv("HYPERPOD_CLUSTER", "demo")
    monkeypatch.setenv("HYPERPOD_GROUPS", json.dumps(["p5", "gone"]))
    with stubber:
        assert handler.handler(EVENT) == {"done": ["HyperPod demo group p5: 0 instances"]}
    stubber.assert_no_pending_responses()


def _example(shape: Shape, name: str = "") -> Any:
    """A value of `shape` that its own constraints accept: every member of every structure, filled in."""
    if isinstance(shape, StructureShape):
        members = list(shape.members.items())[: 1 if shape.is_tagged_union else None]  # a union takes one
        return {key: _example(member, key) for key, member in members}
    if isinstance(shape, ListShape):
        return [_example(shape.member, name)]
    if isinstance(shape, MapShape):
        return {"mlstack.io/role": "workers"}
    kind, meta = shape.type_name, shape.metadata
    if kind == "string":
        if shape.enum:
            return shape.enum[0]
        known = {"ImageId": "ami-0123456789abcdef0", "ExecutionRole": ROLE, "InstanceGroupName": "workers"}
        return known.get(name, "x" * max(1, meta.get("min", 1)))
    if kind in ("integer", "long"):
        return max(1, int(meta.get("min", 1)))
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return datetime.datetime(2026, 12, 24, tzinfo=datetime.UTC)
    return 1.0


SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")
UPDATE = SAGEMAKER.operation_model("UpdateCluster").input_shape
DETAILS = SAGEMAKER.operation_model("DescribeCluster").output_shape.members["InstanceGroups"].member


@pytest.mark.parametrize("node_type", ["Controller", "Login", "Compute", None])  # Slurm groups, then an EKS one
@pytest.mark.parametrize("zero", [True, False])
def test_every_described_member_becomes_a_request_update_cluster_accepts(node_type: str | None, zero: bool) -> None:
    # Every member DescribeCluster can return for a group (botocore's model), filled in: labels, taints,
    # storage, training plan, instance requirements, auto-patching, network interface, images, statuses.
    group = _example(DETAILS)
    if node_type is None:
        del group["SlurmConfig"]
    else:
        group["SlurmConfig"]["NodeType"] = node_type
    group["KubernetesConfig"] = {
        "CurrentLabels": {"old": "1"},
        "DesiredLabels": {"mlstack.io/role": "workers"},
        "CurrentTaints": [{"Key": "gpu", "Value": "old", "Effect": "NoSchedule"}],
        "DesiredTaints": [{"Key": "gpu", "Value": "true", "Effect": "NoSchedule"}],
    }
    group["InstanceRequirements"] = {
        "CurrentInstanceTypes": ["ml.p5.48xlarge"],
        "DesiredInstanceTypes": ["ml.p5e.48xlarge"],
    }
    spec = handler.hyperpod_spec(group, zero)
    validate_parameters({"ClusterName": "demo", "InstanceGroups": [spec]}, UPDATE)  # ParamValidationError if not
    assert spec["KubernetesConfig"] == {
        "Labels": {"mlstack.io/role": "workers"},
        "Taints": [{"Key": "gpu", "Value": "true", "Effect": "NoSchedule"}],
    }
    assert spec["InstanceRequirements"] == {"InstanceTypes": ["ml.p5e.48xlarge"]}
    assert spec["AutoPatchConfig"]["PatchSchedule"] == group["AutoPatchConfig"]["DesiredPatchSchedule"]
    assert {k: spec[k] for k in handler.HYPERPOD_SAME if k in group} == {
        k: group[k] for k in handler.HYPERPOD_SAME if k in group
    }
    assert (spec["InstanceCount"], spec["MinInstanceCount"]) == (
        (0, 0) if zero else (group["TargetCount"], group["MinCount"])
    )
    # Both image fields are reported with a release version: a HyperPod-managed AMI, so no ImageId.
    assert "ImageId" not in spec


def test_only_a_custom_ami_is_sent_again() -> None:
    group = _hyperpod_group("p5", "ml.p5.48xlarge", 2)
    assert "ImageId" not in handler.hyperpod_spec(group, True)  # "default"
    managed = {**group, "DesiredImageId": "ami-0aaaaaaaaaaaaaaaa", "DesiredImageReleaseVersion": "1.2.3"}
    assert "ImageId" not in handler.hyperpod_spec(managed, True)
    custom = {**group, "CurrentImageId": "ami-0bbbbbbbbbbbbbbbb", "DesiredImageId": "ami-0bbbbbbbbbbbbbbbb"}
    assert handler.hyperpod_spec(custom, True)["ImageId"] == "ami-0bbbbbbbbbbbbbbbb"


def test_a_failed_step_is_published_the_others_still_run_and_the_call_fails(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    batch = boto3.client("batch", region_name=REGION)
    monkeypatch.setenv("CLUSTER_NAME", "no-such-cluster")
    monkeypatch.setenv("NODEGROUPS", json.dumps(["p5"]))  # DescribeNodegroup fails: ResourceNotFoundException
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="batch", AssumeRolePolicyDocument="{}")
    environment = batch.create_compute_environment(
        computeEnvironmentName="gpus", type="UNMANAGED", state="ENABLED", serviceRole=role["Role"]["Arn"]
    )
    monkeypatch.setenv("COMPUTE_ENVIRONMENTS", json.dumps([environment["computeEnvironmentArn"]]))
    monkeypatch.setenv("NOTIFY_TOPIC_ARN", topic)
    with pytest.raises(RuntimeError, match="EKS node groups FAILED: ResourceNotFoundException"):
        handler.handler(EVENT)
    (ce,) = batch.describe_compute_environments(computeEnvironments=["gpus"])["computeEnvironments"]
    assert ce["state"] == "DISABLED"
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    body = json.loads(message["Body"])
    assert body["Subject"] == "mlstack: scale to zero FAILED"
    assert "EKS node groups FAILED: ResourceNotFoundException" in body["Message"]
    assert "compute environment" in body["Message"] and "disabled" in body["Message"]
