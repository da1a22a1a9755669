"""Engine hyperpod-eks: HyperPod instance groups joined to the training layer's EKS cluster.

One deploy: the shipped blueprint's template installs the HyperPod dependencies chart (a custom resource) and then
creates the HyperPod cluster. Its template comes from the test session's synth (cdk-nag included there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.config.network import (
    ADMIN_HOST_INTERFACE_ENDPOINTS,
    BATCH_INTERFACE_ENDPOINTS,
    HYPERPOD_INTERFACE_ENDPOINTS,
    TRAINING_INTERFACE_ENDPOINTS,
    default_interface_endpoints,
)
from mlstack.config.training_engines import EKS_LIFECYCLE_SCRIPTS_DIR
from mlstack.constructs.training.hyperpod import HyperPodCluster, HyperPodInstanceGroup
from mlstack.constructs.training.hyperpod_chart import RESOURCE_TYPE
from mlstack.constructs.training.versions import (
    HYPERPOD_CHART_ARCHIVE,
    HYPERPOD_CHART_PATH,
    HYPERPOD_CHART_SHA256,
    HYPERPOD_CLI_COMMIT,
)
from mlstack.k8s.job import render_job
from mlstack.k8s.kube import LABEL_PREFIX
from mlstack.plan import build_plan
from tests.synth import Session

NAME = "hyperpod-eks-training"
BLUEPRINT = BLUEPRINTS_DIR / f"{NAME}.yaml"


def _data() -> dict[str, Any]:
    data = yaml.safe_load(BLUEPRINT.read_text())
    assert isinstance(data, dict)
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _problem(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(Exception) as err:
        load(_write(tmp_path, data))
    return str(err.value)


def _resources(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


# ------------------------------------------------------------------------------------------------ configuration


def test_blueprint_loads_with_the_eks_lifecycle_script() -> None:
    config = load(BLUEPRINT)
    assert config.training is not None and config.training.engine == "hyperpod-eks"
    hyperpod = config.training.hyperpod
    assert hyperpod is not None and hyperpod.eks_dependencies_installed is None
    scripts = hyperpod.scripts_dir_for("hyperpod-eks")
    assert scripts == EKS_LIFECYCLE_SCRIPTS_DIR and (scripts / "on_create.sh").is_file()


def test_slurm_groups_are_rejected(tmp_path: Path) -> None:
    data = _data()
    data["training"]["hyperpod"]["controller"] = {"instance_type": "ml.m7i.xlarge"}
    assert "training.hyperpod.controller: engine hyperpod-eks has no Slurm controller group" in _problem(tmp_path, data)


@pytest.mark.parametrize("blueprint", ["hyperpod-eks-training", "hyperpod-slurm-training"])
@pytest.mark.parametrize("value", [True, False])
def test_retired_two_deploy_switch_is_rejected(tmp_path: Path, blueprint: str, value: bool) -> None:
    data = yaml.safe_load((BLUEPRINTS_DIR / f"{blueprint}.yaml").read_text())
    data["training"]["hyperpod"]["eks_dependencies_installed"] = value
    problem = _problem(tmp_path, data)
    assert "training.hyperpod.eks_dependencies_installed: one `cdk deploy` now installs" in problem
    assert "remove the key" in problem


@pytest.mark.parametrize("version", ["1.35", "1.36"])
def test_kubernetes_version_hyperpod_does_not_support_is_rejected(tmp_path: Path, version: str) -> None:
    data = _data()
    data["training"]["cluster"]["kubernetes_version"] = version
    problem = _problem(tmp_path, data)
    assert f"SageMaker HyperPod does not support Kubernetes {version} for an EKS orchestrator" in problem
    assert "use 1.34" in problem


def test_standard_support_that_would_upgrade_past_hyperpod_is_rejected(tmp_path: Path) -> None:
    data = _data()
    data["training"]["cluster"]["support_type"] = "STANDARD"
    problem = _problem(tmp_path, data)
    assert "training.cluster.support_type: STANDARD lets EKS upgrade the control plane to Kubernetes 1.35" in problem
    assert "set support_type: EXTENDED" in problem


def test_an_older_version_hyperpod_also_supports_one_minor_up_may_stay_standard(tmp_path: Path) -> None:
    from mlstack.config.training_rules import _hyperpod_problems

    config = load(BLUEPRINT)
    assert config.training is not None
    training = config.training.model_copy(
        update={"cluster": config.training.cluster.model_copy(update={"support_type": "STANDARD"})}
    )
    assert [p for p in _hyperpod_problems(training) if "support_type" in p]  # 1.34: 1.35 is not supported
    older = training.model_copy(update={"cluster": training.cluster.model_copy(update={"kubernetes_version": "1.33"})})
    assert not [p for p in _hyperpod_problems(older) if "support_type" in p or "kubernetes_version" in p]


def test_blueprint_uses_a_version_hyperpod_supports() -> None:
    from mlstack.config.training import HYPERPOD_KUBERNETES_VERSIONS

    config = load(BLUEPRINT)
    assert config.training is not None
    assert config.training.cluster.kubernetes_version == "1.34" in HYPERPOD_KUBERNETES_VERSIONS
    assert config.training.cluster.support_type == "EXTENDED"
    control_plane = next(c for c in build_plan(config).costs if c.item == "EKS control plane")
    assert control_plane.unit_per_hour == 0.60  # extended-support rate


def test_workers_must_be_types_hyperpod_offers(tmp_path: Path) -> None:
    data = _data()
    data["training"]["node_groups"][0].update(instance_type="m7i.48xlarge", efa=False)
    assert "HyperPod workers must be GPU or Trainium types HyperPod offers" in _problem(tmp_path, data)


def test_missing_lifecycle_script_is_rejected(tmp_path: Path) -> None:
    data = _data()
    data["training"]["hyperpod"]["on_create"] = "setup.sh"
    assert "training.hyperpod.on_create: 'setup.sh' is not in the lifecycle scripts" in _problem(tmp_path, data)


def test_mixed_zones_are_rejected(tmp_path: Path) -> None:
    data = _data()
    data["training"]["max_nodes"] = 4
    data["training"]["node_groups"].append(
        {"name": "p5b", "instance_type": "p5.48xlarge", "desired_size": 0, "availability_zones": ["use1-az4"]}
    )
    assert "EFA node groups span several AZs" in _problem(tmp_path, data)


def test_batch_key_is_rejected(tmp_path: Path) -> None:
    data = _data()
    data["training"]["batch"] = {}
    assert "training.batch is used by engine batch, not hyperpod-eks" in _problem(tmp_path, data)


# ------------------------------------------------------------------------------------------- endpoints by engine


def test_default_endpoints_follow_the_engine() -> None:
    def keys(engine: str, admin_host: bool = True) -> set[str]:
        return set(default_interface_endpoints(training=True, admin_host=admin_host, inference=False, engine=engine))

    eks = set(TRAINING_INTERFACE_ENDPOINTS) | set(ADMIN_HOST_INTERFACE_ENDPOINTS)
    assert keys("eks") == eks
    assert keys("hyperpod-slurm") == set(HYPERPOD_INTERFACE_ENDPOINTS)
    assert keys("hyperpod-eks") == eks | set(HYPERPOD_INTERFACE_ENDPOINTS)
    assert keys("batch") == set(BATCH_INTERFACE_ENDPOINTS)
    for engine in ("hyperpod-slurm", "batch"):
        assert not keys(engine) & {"eks", "eks-auth", "ec2messages", "ssm"}, engine
    assert {"ecs", "ecs-agent", "ecs-telemetry"} <= keys("batch")


@pytest.mark.parametrize(
    ("blueprint", "expected"),
    [
        ("hyperpod-slurm-training", HYPERPOD_INTERFACE_ENDPOINTS),
        ("batch-training", BATCH_INTERFACE_ENDPOINTS),
    ],
)
def test_shipped_non_eks_blueprints_get_their_engine_endpoints(blueprint: str, expected: dict[str, str]) -> None:
    config = load(BLUEPRINTS_DIR / f"{blueprint}.yaml")
    assert config.network.interface_endpoints == list(expected)


# ------------------------------------------------------------------------------------------ construct, plain app


def _plain() -> tuple[Stack, ec2.Vpc, kms.Key]:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Plain")
    return stack, ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1), kms.Key(stack, "Key")


def test_construct_with_an_eks_orchestrator_in_a_plain_stack() -> None:
    stack, vpc, key = _plain()
    group = ec2.SecurityGroup(stack, "Sg", vpc=vpc)
    arn = "arn:aws:eks:us-east-1:123456789012:cluster/train"
    HyperPodCluster(
        stack,
        "HyperPod",
        cluster_name="train",
        subnet=vpc.private_subnets[0],
        security_groups=[group],
        key=key,
        instance_groups=[
            HyperPodInstanceGroup(name="p5", instance_type="ml.p5.48xlarge", count=2, efa=True, labels={"team": "a"})
        ],
        lifecycle_scripts=EKS_LIFECYCLE_SCRIPTS_DIR,
        eks_cluster_arn=arn,
    )
    template = Template.from_stack(stack).to_json()
    cluster = next(iter(_resources(template, "AWS::SageMaker::Cluster").values()))["Properties"]
    assert cluster["Orchestrator"] == {"Eks": {"ClusterArn": arn}}
    assert cluster["InstanceGroups"][0]["KubernetesConfig"] == {"Labels": {"team": "a"}}
    # No Slurm provisioning_parameters.json next to the EKS script.
    deployment = next(iter(_resources(template, "Custom::CDKBucketDeployment").values()))["Properties"]
    assert len(deployment["SourceBucketNames"]) == 1
    statements = next(iter(_resources(template, "AWS::IAM::Policy").values()))["Properties"]["PolicyDocument"]
    pod_identity = next(s for s in statements["Statement"] if s.get("Sid") == "PodIdentity")
    assert pod_identity["Resource"] == arn and pod_identity["Action"] == "eks-auth:AssumeRoleForPodIdentity"
    assert not _resources(template, "AWS::EKS::AccessEntry")  # HyperPod creates the execution role's entry


def test_eks_orchestrator_takes_compute_groups_only() -> None:
    stack, vpc, key = _plain()
    with pytest.raises(ValueError, match="an EKS-orchestrated cluster takes compute groups only"):
        HyperPodCluster(
            stack,
            "HyperPod",
            cluster_name="train",
            subnet=vpc.private_subnets[0],
            security_groups=[ec2.SecurityGroup(stack, "Sg", vpc=vpc)],
            key=key,
            instance_groups=[
                HyperPodInstanceGroup(name="controller", instance_type="ml.m7i.xlarge", count=1, role="controller")
            ],
            lifecycle_scripts=EKS_LIFECYCLE_SCRIPTS_DIR,
            eks_cluster_arn="arn:aws:eks:us-east-1:123456789012:cluster/train",
        )


# ------------------------------------------------------------------------------- the blueprint, both deploys


@pytest.fixture(scope="module")
def second(session: Session) -> dict[str, Any]:
    """The shipped blueprint's TrainingClusterStack (the name is from the two-deploy days)."""
    from tests.conftest import selected_blueprints

    if NAME not in selected_blueprints():
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    return session.blueprints[NAME].templates["TrainingClusterStack"]


def test_orchestrator_is_the_eks_cluster_of_the_same_stack(second: dict[str, Any]) -> None:
    ((eks_id, eks),) = _resources(second, "AWS::EKS::Cluster").items()
    assert eks["Properties"]["AccessConfig"]["AuthenticationMode"] in ("API", "API_AND_CONFIG_MAP")
    ((_, cluster),) = _resources(second, "AWS::SageMaker::Cluster").items()
    assert cluster["Properties"]["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [eks_id, "Arn"]}}}
    addons = {r["Properties"]["AddonName"]: k for k, r in _resources(second, "AWS::EKS::Addon").items()}
    for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
        assert addons[name] in cluster["DependsOn"], name


def test_instance_groups_recovery_and_labels_for_the_job(second: dict[str, Any]) -> None:
    ((_, cluster),) = _resources(second, "AWS::SageMaker::Cluster").items()
    props = cluster["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    (group,) = props["InstanceGroups"]
    assert group["InstanceGroupName"] == "p5" and group["InstanceType"] == "ml.p5.48xlarge"
    assert group["InstanceCount"] == 2 and group["ThreadsPerCore"] == 1
    assert group["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    # The rendered PyTorchJob selects exactly the label HyperPod puts on the group's nodes (and healthy ones).
    (job,) = render_job(load(BLUEPRINT))
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        selector = dict(replica["template"]["spec"]["nodeSelector"])
        assert selector.pop("sagemaker.amazonaws.com/node-health-status") == "Schedulable"
        assert selector == {f"{LABEL_PREFIX}/node-group": "p5"} == group["KubernetesConfig"]["Labels"]


def test_lifecycle_script_uri_and_order(second: dict[str, Any]) -> None:
    ((_, cluster),) = _resources(second, "AWS::SageMaker::Cluster").items()
    ((bucket_id, bucket),) = _resources(second, "AWS::S3::Bucket").items()
    assert bucket["Properties"]["BucketName"]["Fn::Join"][1][0].startswith("sagemaker-mlstack-")
    config = cluster["Properties"]["InstanceGroups"][0]["LifeCycleConfig"]
    assert config == {
        "OnCreate": "on_create.sh",
        "SourceS3Uri": {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/lifecycle/"]]},
    }
    uploads = _resources(second, "Custom::CDKBucketDeployment")
    assert set(uploads) <= set(cluster["DependsOn"])


def test_vpc_config_one_subnet_efa_and_cluster_security_groups(second: dict[str, Any]) -> None:
    ((eks_id, _),) = _resources(second, "AWS::EKS::Cluster").items()
    ((_, cluster),) = _resources(second, "AWS::SageMaker::Cluster").items()
    vpc = cluster["Properties"]["VpcConfig"]
    assert len(vpc["Subnets"]) == 1
    (efa_id,) = [k for k in _resources(second, "AWS::EC2::SecurityGroup") if k.startswith("EfaSecurityGroup")]
    assert vpc["SecurityGroupIds"] == [
        {"Fn::GetAtt": [efa_id, "GroupId"]},
        {"Fn::GetAtt": [eks_id, "ClusterSecurityGroupId"]},
    ]


def test_role_scope_and_no_access_entry_for_it(second: dict[str, Any]) -> None:
    roles = _resources(second, "AWS::IAM::Role")
    (role_id,) = [k for k in roles if k.startswith("HyperPodExecutionRole")]
    assert "ManagedPolicyArns" not in roles[role_id]["Properties"]
    policy = next(
        p for k, p in _resources(second, "AWS::IAM::Policy").items() if k.startswith("HyperPodExecutionPolicy")
    )
    actions = [a for s in policy["Properties"]["PolicyDocument"]["Statement"] for a in _list(s["Action"])]
    assert all("*" not in a for a in actions)
    assert "eks-auth:AssumeRoleForPodIdentity" in actions
    entries = [r["Properties"]["PrincipalArn"] for r in _resources(second, "AWS::EKS::AccessEntry").values()]
    assert {"Fn::GetAtt": [role_id, "Arn"]} not in entries


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_device_plugin_of_our_own_next_to_hyperpods(second: dict[str, Any]) -> None:
    charts = [
        r["Properties"]["Chart"] for r in second["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    ]
    assert charts == ["kubeflow-trainer"]


def test_one_deploy_installs_the_pinned_chart_before_the_hyperpod_cluster(second: dict[str, Any]) -> None:
    ((install_id, install),) = _resources(second, RESOURCE_TYPE).items()
    props = install["Properties"]
    assert props["ArchiveUrl"] == HYPERPOD_CHART_ARCHIVE and HYPERPOD_CLI_COMMIT in HYPERPOD_CHART_ARCHIVE
    assert props["ChartPath"] == HYPERPOD_CHART_PATH and props["ChartSha256"] == HYPERPOD_CHART_SHA256
    assert (props["Release"], props["Namespace"]) == ("hyperpod-dependencies", "kube-system")
    ((eks_id, _),) = _resources(second, "AWS::EKS::Cluster").items()
    assert props["Endpoint"] == {"Fn::GetAtt": [eks_id, "Endpoint"]}
    ((_, cluster),) = _resources(second, "AWS::SageMaker::Cluster").items()
    assert install_id in cluster["DependsOn"]
    assert "HyperPodChartInstall" not in second.get("Outputs", {})
    # The installer calls the API server as cluster admin through its own access entry, created first.
    entries = {k: r["Properties"] for k, r in _resources(second, "AWS::EKS::AccessEntry").items()}
    (entry_id,) = [k for k in entries if k.startswith("HyperPodChartAccessEntry")]
    assert entry_id in install["DependsOn"]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entries[entry_id]["AccessPolicies"])
    (role_id,) = [k for k in _resources(second, "AWS::IAM::Role") if k.startswith("HyperPodChartRole")]
    assert entries[entry_id]["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_chart_installer_runs_in_the_vpc_with_helm_and_reaches_the_private_endpoint(second: dict[str, Any]) -> None:
    functions = _resources(second, "AWS::Lambda::Function")
    (fn_id,) = [k for k in functions if k.startswith("HyperPodChartFunction")]
    fn = functions[fn_id]["Properties"]
    assert fn["Handler"] == "handler.on_event" and fn["Runtime"].startswith("python3")
    assert fn["VpcConfig"]["SubnetIds"] and "Environment" not in fn
    layers = _resources(second, "AWS::Lambda::LayerVersion")
    (layer_id,) = [k for k in layers if k.startswith("TrainingKubectlLayer")]
    assert fn["Layers"] == [{"Ref": layer_id}]
    assert "kubectl 1.34" in layers[layer_id]["Properties"]["Description"]
    (sg,) = fn["VpcConfig"]["SecurityGroupIds"]
    (eks,) = _resources(second, "AWS::EKS::Cluster").values()
    # The control plane's additional security group (on the API endpoint's ENIs) admits the installer.
    (control_plane,) = eks["Properties"]["ResourcesVpcConfig"]["SecurityGroupIds"]
    ingress = [
        r["Properties"]
        for r in _resources(second, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == sg
    ]
    # Only the control-plane group admits it: the EKS cluster group, also on the endpoint's ENIs, is on every node,
    # and a rule there would open 443 on the nodes to the installer too.
    assert [r["GroupId"] for r in ingress] == [control_plane]
    assert all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in ingress)
    # The install waits for the rule (a rule created after the function ran would leave it timing out).
    ((_, install),) = _resources(second, RESOURCE_TYPE).items()
    rules = [k for k, r in _resources(second, "AWS::EC2::SecurityGroupIngress").items() if r["Properties"] in ingress]
    assert len(rules) == 1 and set(rules) <= set(install["DependsOn"])


def test_execution_role_has_the_vpc_cni_permissions_of_the_hyperpod_reference(second: dict[str, Any]) -> None:
    policy = next(
        p for k, p in _resources(second, "AWS::IAM::Policy").items() if k.startswith("HyperPodExecutionPolicy")
    )
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    actions = {a for s in statements.values() for a in _list(s["Action"])}
    # aws/sagemaker-hyperpod-cluster-setup sagemaker-iam-role-template.yaml: the CNI's calls on the execution role.
    assert {
        "ec2:AttachNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:CreateNetworkInterface",
        "ec2:DeleteNetworkInterface",
        "ec2:DetachNetworkInterface",
        "ec2:CreateTags",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeTags",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
    } <= actions
    resources = json.dumps(statements["VpcCniInterfaces"]["Resource"])
    assert ":instance/*" in resources and ":network-interface/*" in resources


# ------------------------------------------------------------------------------------------------------- plan


def test_plan_names_ml_groups_unknown_prices_and_the_job() -> None:
    plan = build_plan(load(BLUEPRINT))
    hyperpod = [c for c in plan.costs if c.item.startswith("ml.p5.48xlarge")]
    assert hyperpod and all(c.unit_per_hour is None for c in hyperpod)
    quota = next(q for q in plan.quotas if q.service == "sagemaker")
    assert quota.name == "ml.p5.48xlarge for cluster usage" and quota.code == "unknown" and quota.needed == 2
    sections = dict(plan.details["sections"])
    chart_rows = sections["HyperPod on EKS: before the nodes join"]
    assert any(HYPERPOD_CHART_SHA256 in row and "one deploy" in row for row in chart_rows)
    assert not any("deploy again" in row or "git clone" in row for row in chart_rows)
    assert any("kind: PyTorchJob" in row for row in sections["Job manifest"])
    assert not any(c.item.startswith("ml.m7i") for c in plan.costs)  # no Slurm controller on EKS
    eks = {c.item for c in plan.costs}
    assert {"EKS control plane", "m7i.xlarge system nodes (desired)", "m7i.large cluster admin host"} <= eks


def test_stateful_ids_are_the_engine_pins(session: Session, second: dict[str, Any]) -> None:
    from tests.blueprints.test_stateful import HOST_AGENT, STATEFUL_TYPES, TRAINING_PINS_BY_ENGINE, training_pins

    config = session.blueprints[NAME].config
    stateful = {k: r["Type"] for k, r in second["Resources"].items() if r["Type"] in STATEFUL_TYPES}
    # The engine's pins and the GPU nodes' kernel-log group (the CloudWatch agent's).
    assert stateful == {**TRAINING_PINS_BY_ENGINE["hyperpod-eks"], **HOST_AGENT} == training_pins(config)
