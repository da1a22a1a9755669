"""The first multi-node job runs and the cluster stays healthy: reachability, ordering, node health, updates,
credentials, version skew, upkeep, Neuron. Each test pins one reviewed defect of the TrainingClusterStack."""

from __future__ import annotations

import copy
import importlib
import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.config.network import TRAINING_INTERFACE_ENDPOINTS
from mlstack.config.training import KubernetesVersion
from mlstack.constructs.training import cluster as cluster_module
from mlstack.constructs.training import versions
from mlstack.constructs.training.chart_check import CHARTS, index_has, oci_parts, token_url
from mlstack.constructs.training.node_group import NODE_ROLE_POLICIES, taint_keys
from mlstack.errors import BlueprintError
from mlstack.k8s.disruption import job_disruption_budget
from mlstack.k8s.job import render_job
from mlstack.plan import build_plan
from tests.conftest import selected_blueprints
from tests.synth import Session
from tests.training.test_config import BASE

# EKS managed node groups, the admin host and EKS endpoints: the `eks` engine's blueprints (other engines have their
# own tests: tests/blueprints/test_engine_blueprints.py, tests/training/test_hyperpod_eks.py).
TRAINING = [
    n
    for n in selected_blueprints()
    if (t := load(BLUEPRINTS_DIR / f"{n}.yaml").training) is not None and t.engine == "eks"
]


@pytest.fixture(params=TRAINING)
def bp(request: pytest.FixtureRequest, session: Session) -> tuple[str, Any, dict[str, Any]]:
    name = request.param
    return name, session.blueprints[name].config, session.blueprints[name].templates["TrainingClusterStack"]


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _addon(template: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, r) for k, r in _of_type(template, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == name
    ]
    return found


def _accelerated_nodegroups(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in _of_type(template, "AWS::EKS::Nodegroup").items() if "LaunchTemplate" in r["Properties"]}


def _load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def _problem(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, data)
    (line,) = info.value.problems
    return str(line)


@pytest.fixture
def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


# 1. Node monitoring: the DCGM server tolerates the node groups' taints (or auto repair replaces healthy nodes).
def test_node_monitoring_dcgm_server_tolerates_every_node_group_taint(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    _, addon = _addon(template, "eks-node-monitoring-agent")
    values = json.loads(addon["Properties"]["ConfigurationValues"])
    taints = {key for g in config.training.node_groups for key in taint_keys(g.instance, efa=g.efa)}
    assert taints  # every shipped training blueprint has tainted accelerated nodes
    dcgm = values["dcgmAgent"]["tolerations"]
    assert {t["key"] for t in dcgm} == taints
    assert all(t == {"key": t["key"], "operator": "Exists", "effect": "NoSchedule"} for t in dcgm)
    assert values["nodeAgent"]["tolerations"] == [{"operator": "Exists"}]
    # The taints on the node groups are the same keys (one source).
    for ng in _accelerated_nodegroups(template).values():
        assert {t["Key"] for t in ng["Properties"]["Taints"]} <= taints


# 1b. One DCGM host engine per GPU node: the CloudWatch add-on's DCGM exporter is off, the agent's dcgm-server runs
# (aws/containers-roadmap#2763).
def test_one_dcgm_host_engine_per_gpu_node(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    _, cloudwatch = _addon(template, "amazon-cloudwatch-observability")
    values = json.loads(cloudwatch["Properties"]["ConfigurationValues"])
    assert values == {"tolerations": [{"operator": "Exists"}], "dcgmExporter": {"enabled": False}}
    _, monitoring = _addon(template, "eks-node-monitoring-agent")
    assert "tolerations" in json.loads(monitoring["Properties"]["ConfigurationValues"])["dcgmAgent"]
    charts = [r["Properties"]["Chart"] for r in _of_type(template, "Custom::AWSCDK-EKS-HelmChart").values()]
    assert not any("dcgm" in chart for chart in charts)


# 1c. Updates do not evict running jobs: no force update on accelerated groups, and a budget on job pods.
def test_node_group_updates_respect_the_job_disruption_budget(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    if config.training.capacity_manager == "karpenter":
        pytest.skip("no accelerated node groups: Karpenter pools (tests/blueprints/test_karpenter_blueprints.py)")
    groups = _accelerated_nodegroups(template)
    assert groups and all(ng["Properties"]["ForceUpdateEnabled"] is False for ng in groups.values())
    manifests = [
        json.loads(r["Properties"]["Manifest"]) if isinstance(r["Properties"]["Manifest"], str) else None
        for r in _of_type(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
    ]
    budgets = [m for ms in manifests if ms for m in ms if m["kind"] == "PodDisruptionBudget"]
    for budget in budgets:
        budget["metadata"].pop("labels")  # CDK's prune label
    assert budgets == [job_disruption_budget(config.training.job.namespace)]
    (budget,) = budgets
    assert budget["spec"]["minAvailable"] >= 100 * config.training.max_nodes
    assert budget["spec"]["selector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"


def test_plan_makes_the_blueprint_the_one_way_to_scale(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, _ = bp
    plan = build_plan(config)
    text = json.dumps(plan.details) + json.dumps(plan.warnings)
    assert "update-nodegroup-config" not in text
    assert "the blueprint is the one way to scale" in text


# 2. Access: an SSM admin host with a cluster-admin access entry; a private cluster nobody can reach is rejected.
def test_admin_host_is_private_ssm_only_and_cluster_admin(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    ((instance_id, instance),) = _of_type(template, "AWS::EC2::Instance").items()
    props = instance["Properties"]
    assert "KeyName" not in props and not props.get("NetworkInterfaces")
    assert props["Monitoring"] is True and props["EbsOptimized"] is True
    (device,) = props["BlockDeviceMappings"]
    assert device["Ebs"]["Encrypted"] is True and "KmsKeyId" in device["Ebs"]
    role_id = next(k for k, r in _of_type(template, "AWS::IAM::Role").items() if "AdminHostRole" in k)
    policies = json.dumps(template["Resources"][role_id]["Properties"]["ManagedPolicyArns"])
    assert "AmazonSSMManagedInstanceCore" in policies and policies.count("arn:") == 1
    # update-kubeconfig in the user data reads the cluster: DescribeCluster on this cluster only.
    inline = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in _of_type(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    ((statement,),) = inline
    cluster_id = next(iter(_of_type(template, "AWS::EKS::Cluster")))
    assert statement["Action"] == "eks:DescribeCluster"
    assert statement["Resource"] == {"Fn::GetAtt": [cluster_id, "Arn"]}
    entries = [r["Properties"] for r in _of_type(template, "AWS::EKS::AccessEntry").values()]
    admin = [e for e in entries if e["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}]
    assert len(admin) == 1 and "AmazonEKSClusterAdminPolicy" in json.dumps(admin[0]["AccessPolicies"])
    host_sg = props["SecurityGroupIds"][0]["Fn::GetAtt"][0]
    sg = template["Resources"][host_sg]["Properties"]
    assert "SecurityGroupIngress" not in sg
    assert [(e["IpProtocol"], e["FromPort"]) for e in sg["SecurityGroupEgress"]] == [("tcp", 443)]
    ingress = [r["Properties"] for r in _of_type(template, "AWS::EC2::SecurityGroupIngress").values()]
    assert any(
        i.get("SourceSecurityGroupId") == {"Fn::GetAtt": [host_sg, "GroupId"]} and i["FromPort"] == 443 for i in ingress
    )
    assert "AdminHostSessionCommand" in "".join(template["Outputs"]), instance_id
    (host_lt,) = [r for k, r in _of_type(template, "AWS::EC2::LaunchTemplate").items() if k.startswith("AdminHost")]
    assert host_lt["Properties"]["LaunchTemplateData"]["MetadataOptions"]["HttpTokens"] == "required"
    user_data = json.dumps(props["UserData"])
    assert "stable-1.3" in user_data and "update-kubeconfig" in user_data


def test_private_cluster_that_nobody_can_reach_is_rejected(tmp_path: Path, base: dict[str, Any]) -> None:
    base["training"]["cluster"] = {"admin_host": False}
    line = _problem(tmp_path, base)
    assert "leaves nobody able to reach the cluster" in line and "keep admin_host: true" in line
    base["training"]["cluster"]["admin_principal_arns"] = ["arn:aws:iam::123456789012:role/Admin"]
    assert not _load(tmp_path, base).training.cluster.admin_host


def test_plan_shows_the_access_path_and_the_update_strategy() -> None:
    plan = build_plan(load(BLUEPRINTS_DIR / "eks-gpu-training.yaml"))
    sections = dict(plan.details["sections"])
    assert any("aws ssm start-session" in row and "admin host" in row for row in sections["Access"])
    assert any("update strategy MINIMAL" in row for row in sections["Updates"])
    assert any(r.kind == "Admin host" for r in plan.resources)


# 3. FSx waits for its own security-group rules (CreateFileSystem checks them).
def test_fsx_file_system_depends_on_its_security_group_rules(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    ((fs_id, fs),) = _of_type(template, "AWS::FSx::FileSystem").items()
    fsx_sg = fs["Properties"]["SecurityGroupIds"][0]["Fn::GetAtt"][0]
    own_rules = {
        k
        for kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        for k, r in _of_type(template, kind).items()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [fsx_sg, "GroupId"]}
    }
    self_rules = {
        k
        for k in own_rules
        if template["Resources"][k]["Properties"].get("SourceSecurityGroupId") == {"Fn::GetAtt": [fsx_sg, "GroupId"]}
    }
    assert len(self_rules) == 2, fs_id  # 988 and 1018-1023
    assert self_rules <= set(fs.get("DependsOn", []))


# 4 and 6. Accelerated node groups: minimal update strategy; created after the CNI, kube-proxy and Pod Identity agent.
def test_accelerated_node_groups_update_minimally_and_wait_for_the_network_addons(
    bp: tuple[str, Any, dict[str, Any]],
) -> None:
    _, config, template = bp
    if config.training.capacity_manager == "karpenter":
        pytest.skip("no accelerated node groups: Karpenter pools (tests/blueprints/test_karpenter_blueprints.py)")
    before = {_addon(template, name)[0] for name in cluster_module.BEFORE_NODES}
    groups = _accelerated_nodegroups(template)
    assert groups
    for logical_id, ng in groups.items():
        assert ng["Properties"]["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "MINIMAL"}, logical_id
        assert before <= set(ng.get("DependsOn", [])), logical_id


# 5. An ODCR's own cluster placement group; never one for a Capacity Block.
def test_odcr_may_name_its_placement_group(tmp_path: Path, base: dict[str, Any]) -> None:
    capacity = {
        "type": "capacity_reservation",
        "reservation_id": "cr-0123456789abcdef0",
        "placement_group_name": "pg-1",
    }
    base["training"]["node_groups"][0]["capacity"] = capacity
    group = _load(tmp_path, base).training.node_groups[0]
    assert group.capacity.placement_group_name == "pg-1" and not group.uses_placement_group


def test_capacity_block_takes_no_placement_group_name(tmp_path: Path, base: dict[str, Any]) -> None:
    capacity = {"type": "capacity_block", "reservation_id": "cr-0123456789abcdef0", "placement_group_name": "pg-1"}
    base["training"]["node_groups"][0]["capacity"] = capacity
    line = _problem(tmp_path, base)
    assert "placement_group_name is only used with capacity_reservation" in line and "not capacity_block" in line


def test_a_new_placement_group_with_an_odcr_points_at_placement_group_name(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    base["training"]["node_groups"][0].update(
        placement_group=True, capacity={"type": "capacity_reservation", "reservation_id": "cr-0123456789abcdef0"}
    )
    assert "name it in capacity.placement_group_name" in _problem(tmp_path, base)


# 7. Pods cannot use the CNI's permissions through the node role.
def test_vpc_cni_runs_on_its_own_pod_identity_role_and_node_roles_are_minimal(
    bp: tuple[str, Any, dict[str, Any]],
) -> None:
    _, _, template = bp
    _, cni = _addon(template, "vpc-cni")
    ((association,),) = [cni["Properties"]["PodIdentityAssociations"]]
    assert association["ServiceAccount"] == "aws-node"
    role = template["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert "AmazonEKS_CNI_Policy" in json.dumps(role["ManagedPolicyArns"])
    assert "pods.eks.amazonaws.com" in json.dumps(role["AssumeRolePolicyDocument"])
    for ng in _of_type(template, "AWS::EKS::Nodegroup").values():
        node_role = template["Resources"][ng["Properties"]["NodeRole"]["Fn::GetAtt"][0]]["Properties"]
        names = re.findall(r"policy/([\w-]+)", json.dumps(node_role["ManagedPolicyArns"]))
        assert sorted(names) == sorted(NODE_ROLE_POLICIES)


# 8. kubectl skew: every allowed Kubernetes version has the kubectl layer of its own minor version.
def test_every_allowed_kubernetes_version_has_its_own_kubectl_layer() -> None:
    from mlstack.constructs.training.cluster_parts import KUBECTL_LAYERS

    assert set(KUBECTL_LAYERS) == set(get_args(KubernetesVersion))
    for version, layer in KUBECTL_LAYERS.items():
        assert layer.__name__ == f"KubectlV{version.split('.')[1]}Layer", version
        assert hasattr(importlib.import_module(layer.module), layer.__name__), version  # imported only when used


def test_kubernetes_version_without_a_kubectl_layer_is_rejected(tmp_path: Path, base: dict[str, Any]) -> None:
    base["training"]["cluster"] = {"kubernetes_version": "1.33"}
    assert "kubernetes_version" in _problem(tmp_path, base)


# 9. Upkeep: control-plane log group owned by the stack, upgrade policy, no SageMaker endpoints for training only.
def test_control_plane_log_group_is_owned_encrypted_and_expires(bp: tuple[str, Any, dict[str, Any]]) -> None:
    name, config, template = bp
    ((cluster_id, cluster),) = _of_type(template, "AWS::EKS::Cluster").items()
    props = cluster["Properties"]
    assert props["Name"] == f"{name}-cluster"
    assert (
        props["UpgradePolicy"] == {"SupportType": config.training.cluster.support_type} == {"SupportType": "STANDARD"}
    )
    groups = {k: r for k, r in _of_type(template, "AWS::Logs::LogGroup").items() if "ControlPlane" in k}
    ((log_id, log),) = groups.items()
    assert log["Properties"]["LogGroupName"] == f"/aws/eks/{name}-cluster/cluster"
    assert log["Properties"]["RetentionInDays"] == config.training.cluster.log_retention_days
    assert "KmsKeyId" in log["Properties"] and log["DeletionPolicy"] == "RetainExceptOnCreate"
    assert log_id in cluster.get("DependsOn", []), cluster_id


def test_training_only_network_has_no_sagemaker_endpoints(session: Session) -> None:
    names = [n for n in TRAINING if session.blueprints[n].config.inference is None]
    assert names
    for name in names:
        config = session.blueprints[name].config
        assert not any(k.startswith("sagemaker") for k in config.network.interface_endpoints), name
        assert set(TRAINING_INTERFACE_ENDPOINTS) <= set(config.network.interface_endpoints)
        assert {"ssm", "ssmmessages", "ec2messages"} <= set(config.network.interface_endpoints)
        services = json.dumps(
            [
                r["Properties"]["ServiceName"]
                for r in session.blueprints[name].templates["NetworkStack"]["Resources"].values()
                if r["Type"] == "AWS::EC2::VPCEndpoint"
            ]
        )
        assert "sagemaker" not in services and "ecr.dkr" in services


def test_explicit_interface_endpoints_still_win(tmp_path: Path, base: dict[str, Any]) -> None:
    base["network"]["interface_endpoints"] = ["sagemaker.api", "sts"]
    assert _load(tmp_path, base).network.interface_endpoints == ["sagemaker.api", "sts"]


def test_training_without_admin_host_gets_no_ssm_endpoints(tmp_path: Path, base: dict[str, Any]) -> None:
    base["training"]["cluster"] = {"admin_host": False, "admin_principal_arns": ["arn:aws:iam::123456789012:role/A"]}
    endpoints = _load(tmp_path, base).network.interface_endpoints
    assert endpoints == list(TRAINING_INTERFACE_ENDPOINTS)


def test_bad_log_retention_is_rejected(tmp_path: Path, base: dict[str, Any]) -> None:
    base["training"]["cluster"] = {"log_retention_days": 10}
    assert "10 is not a CloudWatch Logs retention period" in _problem(tmp_path, base)


def test_plan_tells_to_scale_a_capacity_block_down_before_it_ends(tmp_path: Path, base: dict[str, Any]) -> None:
    base["training"]["node_groups"][0]["capacity"] = {
        "type": "capacity_block",
        "reservation_id": "cr-0123456789abcdef0",
    }
    sections = dict(build_plan(_load(tmp_path, base)).details["sections"])
    (row,) = [r for r in sections["Updates"] if r.startswith("p5: ")]
    assert "30 minutes before the block ends" in row and "desired_size: 0 in the blueprint, then deploy" in row


# 10. Neuron: no scheduler-extension claim the chart leaves off; the Trainium job gets libfabric's EFA environment.
def test_neuron_chart_leaves_the_scheduler_off_and_nothing_claims_it(session: Session) -> None:
    if "eks-trn1-training" not in session.blueprints:
        pytest.skip("eks-trn1-training not in this session")
    template = session.blueprints["eks-trn1-training"].templates["TrainingClusterStack"]
    (chart,) = [
        r["Properties"]
        for r in _of_type(template, "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == "neuron-helm-chart"
    ]
    values = json.loads(chart["Values"])
    assert values.get("scheduler", {}).get("enabled", False) is False
    # The old pins claimed "device plugin + scheduler extension" while the chart's scheduler stayed off.
    assert "scheduler" not in versions.NEURON_HELM_CHART.source
    assert "Device plugin + scheduler extension" not in Path(cluster_module.__file__).read_text()


def test_chart_check_reads_helm_indexes_and_oci_references() -> None:
    # `make check-charts` (network) checks each pinned version where the chart is pulled from; its parsing is
    # checked here offline.
    assert oci_parts(versions.NEURON_HELM_CHART.repository) == ("public.ecr.aws", "neuron/neuron-helm-chart")
    index = {"entries": {"aws-efa-k8s-device-plugin": [{"version": "0.5.30"}, {"version": "0.5.29"}]}}
    assert index_has(index, "aws-efa-k8s-device-plugin", "v0.5.30")
    assert not index_has(index, "aws-efa-k8s-device-plugin", "v0.5.31")
    challenge = 'Bearer realm="https://public.ecr.aws/token/",service="public.ecr.aws",scope="aws"'
    assert token_url(challenge, "neuron/neuron-helm-chart") == (
        "https://public.ecr.aws/token/?scope=repository:neuron/neuron-helm-chart:pull&service=public.ecr.aws"
    )
    with pytest.raises(ValueError, match="is not an oci:// reference"):
        oci_parts(versions.EFA_DEVICE_PLUGIN.repository)


def test_chart_check_covers_every_pinned_chart() -> None:
    # The Karpenter CRD chart (and KEDA's) were pinned but not checked.
    pinned = {v.release for v in vars(versions).values() if isinstance(v, versions.Chart)}
    assert {c.release for c in CHARTS} == pinned
    assert versions.KARPENTER_CRD.version == versions.KARPENTER.version
    assert oci_parts(versions.KARPENTER_CRD.repository) == ("public.ecr.aws", "karpenter/karpenter-crd")


def test_trainium_job_gets_the_neuron_efa_environment() -> None:
    runtime, _ = render_job(load(BLUEPRINTS_DIR / "eks-trn1-training.yaml"))
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["FI_EFA_FORK_SAFE"] == "1"
    assert "NCCL_DEBUG" not in env
