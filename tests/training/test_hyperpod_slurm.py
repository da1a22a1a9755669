"""HyperPod with Slurm, template side: volume encryption that HyperPod accepts, an execution role whose every
statement can be allowed (checked against the Service Authorization Reference), and the first job's code in the
lifecycle upload."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.config.training_engines import EKS_LIFECYCLE_SCRIPTS_DIR, LIFECYCLE_SCRIPTS_DIR, WORKLOADS_DIR
from mlstack.constructs.training.hyperpod import HyperPodCluster, HyperPodInstanceGroup
from mlstack.errors import BlueprintError
from tests.conftest import selected_blueprints
from tests.synth import Session

SLURM = "hyperpod-slurm-training"
EKS_ARN = "arn:aws:eks:us-east-1:123456789012:cluster/demo"
GROUPS = [
    HyperPodInstanceGroup(name="controller", instance_type="ml.m7i.xlarge", count=1, role="controller"),
    HyperPodInstanceGroup(name="p5", instance_type="ml.p5.48xlarge", count=2, efa=True),
]

# What each action the execution role uses authorizes on, and the condition keys it supports (Service Authorization
# Reference: Amazon EC2, Amazon S3, AWS KMS, Amazon CloudWatch Logs, Amazon CloudWatch, Amazon Session Manager
# Message Gateway Service, Amazon EKS Auth, Amazon ECR). A statement must name every required resource type of each
# of its actions (an action that also authorizes on a type the statement lacks is never allowed), `*` for actions
# without resource types, and only condition keys of its actions (global aws:* keys aside). An action not listed
# here fails the test: look it up and add it.
SAR: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "s3:GetObject": (frozenset({"object"}), frozenset()),
    "s3:ListBucket": (frozenset({"bucket"}), frozenset({"s3:prefix", "s3:delimiter", "s3:max-keys"})),
    "kms:Decrypt": (frozenset({"key"}), frozenset({"kms:ViaService", "kms:CallerAccount"})),
    "kms:CreateGrant": (
        frozenset({"key"}),
        frozenset({"kms:GrantIsForAWSResource", "kms:ViaService", "kms:GranteePrincipal", "kms:GrantOperations"}),
    ),
    "kms:DescribeKey": (frozenset({"key"}), frozenset({"kms:ViaService", "kms:CallerAccount"})),
    "ec2:CreateNetworkInterface": (frozenset({"network-interface", "subnet", "security-group"}), frozenset()),
    "ec2:CreateNetworkInterfacePermission": (frozenset({"network-interface"}), frozenset()),
    "ec2:DeleteNetworkInterface": (frozenset({"network-interface"}), frozenset()),
    "ec2:DeleteNetworkInterfacePermission": (frozenset({"network-interface"}), frozenset()),
    "ec2:DetachNetworkInterface": (frozenset({"instance", "network-interface"}), frozenset()),
    # The VPC CNI on HyperPod EKS nodes (required resource types only; ModifyNetworkInterfaceAttribute also takes the
    # security groups it sets).
    "ec2:AttachNetworkInterface": (frozenset({"instance", "network-interface"}), frozenset()),
    "ec2:AssignPrivateIpAddresses": (frozenset({"network-interface"}), frozenset()),
    "ec2:UnassignPrivateIpAddresses": (frozenset({"network-interface"}), frozenset()),
    "ec2:ModifyNetworkInterfaceAttribute": (frozenset({"network-interface"}), frozenset()),
    **{f"ec2:Describe{x}": (frozenset(), frozenset()) for x in ("Instances", "InstanceTypes", "Tags")},
    "ec2:CreateTags": (frozenset({"network-interface"}), frozenset({"ec2:CreateAction"})),
    **{f"ec2:Describe{x}": (frozenset(), frozenset()) for x in ("NetworkInterfaces", "Vpcs", "DhcpOptions", "Subnets")},
    "ec2:DescribeSecurityGroups": (frozenset(), frozenset()),
    "logs:CreateLogGroup": (frozenset({"log-group"}), frozenset()),
    "logs:CreateLogStream": (frozenset({"log-stream"}), frozenset()),
    "logs:PutLogEvents": (frozenset({"log-stream"}), frozenset()),
    "logs:DescribeLogStreams": (frozenset({"log-group"}), frozenset()),
    "cloudwatch:PutMetricData": (frozenset(), frozenset({"cloudwatch:namespace"})),
    **{
        f"ssmmessages:{x}": (frozenset(), frozenset())
        for x in ("CreateControlChannel", "CreateDataChannel", "OpenControlChannel", "OpenDataChannel")
    },
    "eks-auth:AssumeRoleForPodIdentity": (frozenset({"cluster"}), frozenset()),
    "ecr:GetAuthorizationToken": (frozenset(), frozenset()),
    **{
        f"ecr:{x}": (frozenset({"repository"}), frozenset())
        for x in ("BatchCheckLayerAvailability", "BatchGetImage", "GetDownloadUrlForLayer")
    },
}


def _render(value: Any) -> str:
    """An ARN from the template as text: references become ${...}."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(_render(v) for v in value["Fn::Join"][1])
    if "Ref" in value:
        return "${" + str(value["Ref"]) + "}"
    if "Fn::GetAtt" in value:
        return "${" + ".".join(value["Fn::GetAtt"]) + "}"
    if "Fn::GetStackOutput" in value:
        return "${output:" + str(value["Fn::GetStackOutput"]["OutputName"]) + "}"
    raise AssertionError(f"unexpected resource {value}")


def _resource_type(arn: str, template: dict[str, Any]) -> str:
    plain = re.sub(r"\$\{AWS::\w+\}", "x", arn)  # pseudo parameters hold colons
    ec2_type = re.match(r"arn:[^:]+:ec2:[^:]+:[^:]+:([a-z-]+)/", plain)
    if ec2_type:
        return ec2_type.group(1)
    if ":log-stream:" in arn:
        return "log-stream"
    if ":log-group:" in arn:
        return "log-group"
    for pattern, kind in ((r":eks:.*:cluster/", "cluster"), (r":ecr:.*:repository/", "repository")):
        if re.search(pattern, arn):
            return kind
    ref = re.fullmatch(r"\$\{([^.}]+)\.Arn\}(/.+)?", arn)
    if ref and template["Resources"][ref.group(1)]["Type"] == "AWS::S3::Bucket":
        return "object" if ref.group(2) else "bucket"
    if (ref and template["Resources"][ref.group(1)]["Type"] == "AWS::KMS::Key") or re.fullmatch(
        r"\$\{output:\w*Key\w*Arn\w*\}", arn
    ):
        return "key"
    raise AssertionError(f"cannot classify {arn}")


def _execution_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = next(r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    role = cluster["Properties"]["InstanceGroups"][0]["ExecutionRole"]["Fn::GetAtt"][0]
    return [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def _sar_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    for statement in _execution_statements(template):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        rendered = [_render(r) for r in resources]
        types = {"*"} if rendered == ["*"] else {_resource_type(r, template) for r in rendered}
        keys = {k for op in statement.get("Condition", {}).values() for k in op if not k.startswith("aws:")}
        for action in actions:
            assert action in SAR, f"{action}: look it up in the Service Authorization Reference and add it to SAR"
            required, condition_keys = SAR[action]
            if required and not required <= types:
                problems.append(f"{statement['Sid']}: {action} authorizes on {sorted(required)}, got {sorted(types)}")
            if not required and types != {"*"}:
                problems.append(f"{statement['Sid']}: {action} takes no resource ARN, got {sorted(types)}")
            if keys - condition_keys:
                problems.append(f"{statement['Sid']}: {action} has no condition key {sorted(keys - condition_keys)}")
    return problems


def _plain(**kwargs: Any) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "Plain", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0)
    group = ec2.SecurityGroup(stack, "Nodes", vpc=vpc)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    eks = kwargs.pop("eks", False)
    volume_key = key if kwargs.pop("volume_key", False) else None
    HyperPodCluster(
        stack,
        "HyperPod",
        cluster_name="plain",
        subnet=vpc.isolated_subnets[0],
        security_groups=[group],
        key=key,
        instance_groups=[g for g in GROUPS if not eks or g.role == "compute"],
        lifecycle_scripts=EKS_LIFECYCLE_SCRIPTS_DIR if eks else LIFECYCLE_SCRIPTS_DIR,
        eks_cluster_arn=EKS_ARN if eks else None,
        volume_key=volume_key,
        **kwargs,
    )
    return dict(Template.from_stack(stack).to_json())


@pytest.fixture(scope="module")
def slurm(session: Session) -> dict[str, Any]:
    if SLURM not in selected_blueprints():
        pytest.skip(f"{SLURM} not selected by MLSTACK_TEST_BLUEPRINTS")
    return session.blueprints[SLURM].templates["TrainingClusterStack"]


# ----------------------------------------------------------------------------- item 4: volume encryption


def test_slurm_volumes_use_hyperpods_key(slurm: dict[str, Any]) -> None:
    # A customer-managed volume key needs NodeProvisioningMode Continuous, which HyperPod offers only with EKS.
    cluster = next(r for r in slurm["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    assert "NodeProvisioningMode" not in cluster["Properties"]
    for group in cluster["Properties"]["InstanceGroups"]:
        (storage,) = group["InstanceStorageConfigs"]
        assert "VolumeKmsKeyId" not in storage["EbsVolumeConfig"], group["InstanceGroupName"]


def test_eks_volume_key_comes_with_continuous_provisioning_and_grants() -> None:
    template = _plain(eks=True, volume_key=True, node_provisioning_mode="Continuous")
    cluster = next(r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    assert cluster["Properties"]["NodeProvisioningMode"] == "Continuous"
    key_id = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key")
    for group in cluster["Properties"]["InstanceGroups"]:
        assert group["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeKmsKeyId"] == {
            "Fn::GetAtt": [key_id, "Arn"]
        }
    statements = {s["Sid"]: s for s in _execution_statements(template)}
    assert statements["VolumeKeyGrants"] == {
        "Action": "kms:CreateGrant",
        "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [key_id, "Arn"]},
        "Sid": "VolumeKeyGrants",
    }
    assert statements["DescribeVolumeKey"]["Action"] == "kms:DescribeKey"
    assert _sar_problems(template) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"volume_key": True}, "volume_key: HyperPod takes a customer-managed volume key only with"),
        ({"node_provisioning_mode": "Continuous"}, "node_provisioning_mode: HyperPod supports Continuous only for EKS"),
    ],
)
def test_construct_rejects_what_hyperpod_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _plain(**kwargs)


def test_blueprint_asking_for_a_customer_volume_key_on_slurm_gets_one_line(tmp_path: Path) -> None:
    data = yaml.safe_load((BLUEPRINTS_DIR / f"{SLURM}.yaml").read_text())
    data = copy.deepcopy(data)
    data["training"]["hyperpod"]["volume_key"] = "customer_managed"
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BlueprintError) as err:
        load(path)
    (line,) = [x for x in str(err.value).splitlines() if "volume_key" in x]
    assert "training.hyperpod.volume_key: customer_managed needs continuous node provisioning" in line
    assert "use engine hyperpod-eks" in line


def test_volume_key_defaults_per_engine() -> None:
    config = load(BLUEPRINTS_DIR / f"{SLURM}.yaml").training
    assert config is not None and config.hyperpod is not None
    assert not config.hyperpod.customer_volume_key("hyperpod-slurm")
    assert config.hyperpod.customer_volume_key("hyperpod-eks")


# ----------------------------------------------------------------------------- item 5: the execution role


def test_every_execution_role_statement_can_be_allowed(slurm: dict[str, Any]) -> None:
    assert _sar_problems(slurm) == []
    detach = next(s for s in _execution_statements(slurm) if s["Sid"] == "DetachNodeInterfaces")
    assert {_resource_type(_render(r), slurm) for r in detach["Resource"]} == {"instance", "network-interface"}


def test_eks_execution_role_statements_can_be_allowed() -> None:
    assert _sar_problems(_plain(eks=True)) == []


# ----------------------------------------------------------------------------- item 7: the first job's code


def test_lifecycle_upload_carries_the_first_job(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Plain", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0)
    HyperPodCluster(
        stack,
        "HyperPod",
        cluster_name="plain",
        subnet=vpc.isolated_subnets[0],
        security_groups=[ec2.SecurityGroup(stack, "Nodes", vpc=vpc)],
        key=kms.Key(stack, "Key", enable_key_rotation=True),
        instance_groups=GROUPS,
        lifecycle_scripts=LIFECYCLE_SCRIPTS_DIR,
        workloads=WORKLOADS_DIR,
    )
    app.synth()
    uploaded = {
        p.relative_to(d).as_posix() for d in tmp_path.glob("asset.*") if d.is_dir() for p in d.rglob("*") if p.is_file()
    }
    assert {
        "on_create.sh",
        "train.sbatch",
        "stage_workloads.sh",
        "build_venv.sh",
        "requirements-cluster.txt",
    } <= uploaded
    assert {"workloads/train.py", "workloads/comm.py", "workloads/lm.py"} <= uploaded
    assert not any("__pycache__" in p or p.startswith("workloads/serve") for p in uploaded)
    template = json.loads((tmp_path / "Plain.template.json").read_text())
    upload = next(r for r in template["Resources"].values() if r["Type"] == "Custom::CDKBucketDeployment")
    assert len(upload["Properties"]["SourceObjectKeys"]) == 3  # scripts, workloads, provisioning_parameters.json


def test_the_cluster_venv_pins_the_tested_versions() -> None:
    # torch: the version the workloads are tested with. numpy (torch.distributed.checkpoint needs it): the same major
    # version, at the newest release with wheels for the AMI's Python 3.10 (NumPy 2.3 dropped 3.10), since the
    # tested 2.4 cannot install there (tests/runtime/test_hyperpod_slurm_first_job_env.py).
    tested = dict(
        line.split("==")
        for line in (Path(__file__).resolve().parents[2] / "requirements-workloads.txt").read_text().splitlines()
        if line.startswith(("torch==", "numpy=="))
    )
    cluster = dict(
        line.split("==")
        for line in (LIFECYCLE_SCRIPTS_DIR / "requirements-cluster.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert cluster["torch"] == tested["torch"]
    assert cluster["numpy"].split(".")[0] == tested["numpy"].split(".")[0]
