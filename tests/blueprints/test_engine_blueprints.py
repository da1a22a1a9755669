"""The HyperPod (Slurm) and Batch blueprints, from the one session synth: each engine's essentials."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstack.catalog import efa_interface_count, efa_layout
from tests.conftest import selected_blueprints
from tests.synth import Session

HYPERPOD = "hyperpod-slurm-training"
BATCH = "batch-training"


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _one(template: dict[str, Any], kind: str, prefix: str = "") -> tuple[str, dict[str, Any]]:
    found = {k: r for k, r in _resources(template, kind).items() if k.startswith(prefix)}
    assert len(found) == 1, f"{kind}: {sorted(found)}"
    return next(iter(found.items()))


def _template(session: Session, name: str) -> dict[str, Any]:
    if name not in selected_blueprints():
        pytest.skip(f"{name} not selected by MLSTACK_TEST_BLUEPRINTS")
    return session.blueprints[name].templates["TrainingClusterStack"]


def _subnet_output(session: Session, name: str, ref: Any) -> Any:
    out = ref["Fn::GetStackOutput"]
    return session.blueprints[name].templates["NetworkStack"]["Outputs"][out["OutputName"]]["Value"]


def _self_referencing(template: dict[str, Any], group_id: str) -> bool:
    ingress = [
        r["Properties"]
        for r in _resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    return any(
        p["IpProtocol"] == "-1" and p["SourceSecurityGroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]} for p in ingress
    )


# --------------------------------------------------------------------------------------------------- HyperPod


@pytest.fixture(scope="module")
def hyperpod(session: Session) -> dict[str, Any]:
    return _template(session, HYPERPOD)


def test_hyperpod_instance_groups(hyperpod: dict[str, Any]) -> None:
    _, cluster = _one(hyperpod, "AWS::SageMaker::Cluster")
    groups = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    assert list(groups) == ["controller", "login", "p5"]
    assert groups["controller"]["InstanceType"] == "ml.m7i.xlarge" and groups["controller"]["InstanceCount"] == 1
    worker = groups["p5"]
    assert worker["InstanceType"] == "ml.p5.48xlarge" and worker["InstanceCount"] == 2
    assert worker["ThreadsPerCore"] == 1
    assert worker["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert "OnStartDeepHealthChecks" not in groups["controller"]
    volume = worker["InstanceStorageConfigs"][0]["EbsVolumeConfig"]
    # HyperPod takes a customer-managed volume key only with continuous provisioning, an EKS-only mode.
    assert volume["VolumeSizeInGB"] == 500 and "VolumeKmsKeyId" not in volume


def test_hyperpod_lifecycle_scripts_exist_before_the_cluster(hyperpod: dict[str, Any]) -> None:
    _, cluster = _one(hyperpod, "AWS::SageMaker::Cluster")
    bucket_id, bucket = _one(hyperpod, "AWS::S3::Bucket")
    name = bucket["Properties"]["BucketName"]["Fn::Join"]
    assert name[0] == "-" and name[1][0].startswith("sagemaker-mlstack-")  # the documented sagemaker-* bucket form
    for group in cluster["Properties"]["InstanceGroups"]:
        config = group["LifeCycleConfig"]
        assert config["OnCreate"] == "on_create.sh"
        assert config["SourceS3Uri"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/lifecycle/"]]}
    upload_id, upload = _one(hyperpod, "Custom::CDKBucketDeployment")
    assert upload["Properties"]["DestinationBucketName"] == {"Ref": bucket_id}
    assert upload["Properties"]["DestinationBucketKeyPrefix"] == "lifecycle/"
    # scripts, runtime/workloads, provisioning_parameters, the CloudWatch agent's installer and configuration
    assert len(upload["Properties"]["SourceObjectKeys"]) == 5
    assert upload_id in cluster["DependsOn"]


def test_hyperpod_role_is_scoped(hyperpod: dict[str, Any]) -> None:
    _, cluster = _one(hyperpod, "AWS::SageMaker::Cluster")
    role_arns = {json.dumps(g["ExecutionRole"]) for g in cluster["Properties"]["InstanceGroups"]}
    assert len(role_arns) == 1
    role_id = json.loads(role_arns.pop())["Fn::GetAtt"][0]
    role = hyperpod["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "ManagedPolicyArns" not in role
    policies = [
        (pid, p["Properties"])
        for pid, p in _resources(hyperpod, "AWS::IAM::Policy").items()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    ((policy_id, policy),) = policies
    assert policy_id in cluster["DependsOn"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    bucket_id, _ = _one(hyperpod, "AWS::S3::Bucket")
    assert statements["ReadLifecycleScripts"]["Action"] == "s3:GetObject"
    assert statements["ReadLifecycleScripts"]["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/lifecycle/*"]]
    }
    assert statements["ListLifecycleScripts"]["Condition"] == {
        "StringLike": {"s3:prefix": ["lifecycle", "lifecycle/*"]}
    }
    for statement in statements.values():
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert all("*" not in a for a in actions), statement
    assert not any(
        a.startswith("s3:")
        for s in statements.values()
        for a in json.dumps(s["Action"]).split('"')
        if a.startswith("s3:") and s["Sid"] not in ("ReadLifecycleScripts", "ListLifecycleScripts")
    )


def test_hyperpod_vpc_config_node_recovery_and_orchestrator(hyperpod: dict[str, Any], session: Session) -> None:
    _, cluster = _one(hyperpod, "AWS::SageMaker::Cluster")
    props = cluster["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    assert "Orchestrator" not in props  # Slurm configured by the lifecycle scripts (provisioning_parameters.json)
    (subnet,) = props["VpcConfig"]["Subnets"]
    assert _subnet_output(session, HYPERPOD, subnet) == {"Ref": _subnet_in(session, HYPERPOD, "use1-az6")}
    groups = [g["Fn::GetAtt"][0] for g in props["VpcConfig"]["SecurityGroupIds"]]
    assert len(groups) == 2
    assert all(_self_referencing(hyperpod, g) for g in groups)


def _subnet_in(session: Session, name: str, az_id: str) -> str:
    network = session.blueprints[name].templates["NetworkStack"]
    return next(
        k
        for k, r in _resources(network, "AWS::EC2::Subnet").items()
        if r["Properties"].get("AvailabilityZoneId") == az_id and "Private" in k
    )


# --------------------------------------------------------------------------------------------------- Batch


@pytest.fixture(scope="module")
def batch(session: Session) -> dict[str, Any]:
    return _template(session, BATCH)


def test_batch_launch_template_has_every_efa(batch: dict[str, Any]) -> None:
    _, lt = _one(batch, "AWS::EC2::LaunchTemplate")
    data = lt["Properties"]["LaunchTemplateData"]
    nics = data["NetworkInterfaces"]
    expected = efa_layout("p5.48xlarge")
    assert len([n for n in nics if n["InterfaceType"] != "interface"]) == efa_interface_count("p5.48xlarge") == 32
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == [
        (e.network_card_index, e.device_index, e.interface_type) for e in expected
    ]
    assert all("AssociatePublicIpAddress" not in n and len(n["Groups"]) == 2 for n in nics)
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True


def test_batch_compute_environment(batch: dict[str, Any]) -> None:
    _, ce = _one(batch, "AWS::Batch::ComputeEnvironment")
    pg_id, pg = _one(batch, "AWS::EC2::PlacementGroup")
    lt_id, _ = _one(batch, "AWS::EC2::LaunchTemplate")
    resources = ce["Properties"]["ComputeResources"]
    assert ce["Properties"]["Type"] == "MANAGED" and resources["Type"] == "EC2"  # never SPOT for multi-node
    assert pg["Properties"]["Strategy"] == "cluster"
    assert resources["PlacementGroup"] == {"Fn::GetAtt": [pg_id, "GroupName"]}
    assert resources["InstanceTypes"] == ["p5.48xlarge"]
    assert resources["MinvCpus"] == 0 and resources["MaxvCpus"] == 2 * 192
    assert resources["LaunchTemplate"]["LaunchTemplateId"] == {"Ref": lt_id}
    assert len(resources["Subnets"]) == 1


def test_batch_job_definition(batch: dict[str, Any]) -> None:
    _, job = _one(batch, "AWS::Batch::JobDefinition")
    ce_id, _ = _one(batch, "AWS::Batch::ComputeEnvironment")
    _, queue = _one(batch, "AWS::Batch::JobQueue")
    assert queue["Properties"]["ComputeEnvironmentOrder"][0]["ComputeEnvironment"] == {"Ref": ce_id}
    props = job["Properties"]
    assert props["Type"] == "multinode"
    nodes = props["NodeProperties"]
    assert nodes["NumNodes"] == 2 and nodes["MainNode"] == 0
    (node_range,) = nodes["NodeRangeProperties"]
    assert node_range["TargetNodes"] == "0:"
    container = node_range["Container"]
    devices = container["LinuxParameters"]["Devices"]
    assert [d["HostPath"] for d in devices] == [f"/dev/infiniband/uverbs{i}" for i in range(32)]
    assert all(d["ContainerPath"] == d["HostPath"] for d in devices)
    # torchrun's arguments, through the launcher that keeps the script's exit codes (mlstack.workloads.resilience)
    assert "elastic.py --nnodes=" in container["Command"][-1] and "AWS_BATCH_JOB_NODE_INDEX" in container["Command"][-1]
    assert container["MountPoints"] == [{"ContainerPath": "/fsx", "SourceVolume": "fsx"}]
    assert {"Type": "GPU", "Value": "8"} in container["ResourceRequirements"]
    log_id, log = _one(batch, "AWS::Logs::LogGroup", "BatchJobLogs")
    assert container["LogConfiguration"]["Options"]["awslogs-group"] == {"Ref": log_id}
    assert log["Properties"]["RetentionInDays"] == 90 and "KmsKeyId" in log["Properties"]
    assert log["DeletionPolicy"] == "RetainExceptOnCreate"


def test_batch_fsx_is_mounted_by_user_data(batch: dict[str, Any]) -> None:
    _, lt = _one(batch, "AWS::EC2::LaunchTemplate")
    fsx_id, _ = _one(batch, "AWS::FSx::FileSystem")
    user_data = json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])
    assert fsx_id in user_data and "lustre" in user_data and "efa_installer.sh" in user_data
