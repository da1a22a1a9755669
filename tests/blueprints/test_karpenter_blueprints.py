"""Blueprints with `capacity_manager: karpenter` / `teams`, from the one session synth: the first job's path
through Karpenter (controller policy, node role, access entry, interruption queue, pools) and Kueue, as the
templates hold it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mlstack.access import cli as access_cli
from mlstack.access import evaluate
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.constructs.training import versions
from tests.conftest import selected_blueprints
from tests.synth import Session
from tests.training.crds import schema

KARPENTER = [
    n
    for n in selected_blueprints()
    if (t := load(BLUEPRINTS_DIR / f"{n}.yaml").training) is not None
    and t.capacity_manager == "karpenter"
    and t.engine == "eks"
]


def test_a_karpenter_blueprint_is_shipped() -> None:
    assert "eks-karpenter-training" in [p.stem for p in BLUEPRINTS_DIR.glob("*.yaml")]


@pytest.fixture(params=KARPENTER)
def bp(request: pytest.FixtureRequest, session: Session) -> tuple[str, Any, dict[str, Any]]:
    name = request.param
    return name, session.blueprints[name].config, session.blueprints[name].templates["TrainingClusterStack"]


def _of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _placeholders(value: Any) -> str:
    """A `Fn::Join` manifest with every token replaced by a well-formed placeholder ID."""
    if isinstance(value, str):
        return value
    text = ""
    for part in value["Fn::Join"][1]:
        if isinstance(part, str):
            text += part
            continue
        terms = text.rfind("SelectorTerms")
        kind = text[text.rfind('"', 0, terms) + 1 : terms] if terms >= 0 and text.endswith('"id":"') else ""
        text += {"subnet": "subnet-0123456789abcdef0", "securityGroup": "sg-0123456789abcdef0"}.get(kind, "placeholder")
    return text


def _statements(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [
        s
        for p in _of(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_no_accelerated_node_group_only_pools(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    groups = _of(template, "AWS::EKS::Nodegroup")
    assert len(groups) == 1 and next(iter(groups)).startswith("TrainingSystemNodes")
    pools = [k for k, r in _of(template, "Custom::AWSCDK-EKS-KubernetesResource").items() if "Pool" in k]
    assert len(pools) == len(config.training.node_groups)


def test_nodes_join_through_an_ec2_linux_access_entry_of_the_node_role(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    entries = [
        r["Properties"]
        for r in _of(template, "AWS::EKS::AccessEntry").values()
        if r["Properties"].get("Type") == "EC2_LINUX"
    ]
    assert len(entries) == 1
    role_id = entries[0]["PrincipalArn"]["Fn::GetAtt"][0]
    role = template["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    managed = json.dumps(role["ManagedPolicyArns"])
    assert "AmazonEKSWorkerNodePolicy" in managed and "AmazonEC2ContainerRegistryReadOnly" in managed
    assert "AmazonEKS_CNI_Policy" not in managed  # the CNI has its own Pod Identity role


def test_controller_may_launch_an_efa_node_and_pass_only_the_node_role(bp: tuple[str, Any, dict[str, Any]]) -> None:
    name, _, template = bp
    assoc = next(
        r["Properties"]
        for r in _of(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["ServiceAccount"] == "karpenter"
    )
    assert assoc["Namespace"] == "kube-system"
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    statements = {s["Sid"]: s for s in _statements(template, role_id)}
    tagged = statements["AllowScopedEC2InstanceActionsWithTags"]
    assert {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate"} == set(tagged["Action"])
    cluster = f"{name}-cluster"
    assert tagged["Condition"]["StringEquals"][f"aws:RequestTag/kubernetes.io/cluster/{cluster}"] == "owned"
    passing = statements["AllowPassingInstanceRole"]
    node_role = next(
        r["Properties"]["PrincipalArn"]
        for r in _of(template, "AWS::EKS::AccessEntry").values()
        if r["Properties"].get("Type") == "EC2_LINUX"
    )
    assert passing["Resource"] == node_role
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    key = statements["AllowVolumeKeyThroughEc2"]
    assert "kms:CreateGrant" in key["Action"] and key["Condition"]["StringEquals"]["kms:ViaService"]


def test_interruption_queue_gets_the_five_event_kinds(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    ((queue_id, queue),) = _of(template, "AWS::SQS::Queue").items()
    assert queue["Properties"]["MessageRetentionPeriod"] == 300 and queue["Properties"]["SqsManagedSseEnabled"]
    rules = _of(template, "AWS::Events::Rule")
    detail_types = {r["Properties"]["EventPattern"]["detail-type"][0] for r in rules.values()}
    assert detail_types == {
        "AWS Health Event",
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Capacity Reservation Instance Interruption Warning",
    }
    assert all(r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]} for r in rules.values())
    chart = next(
        r for r in _of(template, "Custom::AWSCDK-EKS-HelmChart").values() if r["Properties"]["Release"] == "karpenter"
    )
    assert chart["Properties"]["Repository"] == versions.KARPENTER.repository
    assert chart["Properties"]["Version"] == versions.KARPENTER.version
    assert {"Fn::GetAtt": [queue_id, "QueueName"]} in chart["Properties"]["Values"]["Fn::Join"][1]
    assert any(d.startswith("KarpenterPodIdentity") for d in chart["DependsOn"])
    values = "".join(p for p in chart["Properties"]["Values"]["Fn::Join"][1] if isinstance(p, str))
    assert '"featureGates":{"nodeOverlay":true}' in values  # the pools' huge-pages NodeOverlays take effect


def test_pool_manifests_in_the_template_are_valid_and_follow_the_chart(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    charts = {r["Properties"]["Release"]: k for k, r in _of(template, "Custom::AWSCDK-EKS-HelmChart").items()}
    for resource in _of(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        docs = json.loads(_placeholders(resource["Properties"]["Manifest"]))
        kinds = {d["kind"] for d in docs}
        if "NodePool" in kinds:
            assert charts["karpenter"] in resource["DependsOn"]
        if "ClusterQueue" in kinds:
            assert charts["kueue"] in resource["DependsOn"]
        for doc in docs:
            if doc["kind"] in (
                "NodePool",
                "NodeOverlay",
                "EC2NodeClass",
                "ClusterQueue",
                "LocalQueue",
                "ResourceFlavor",
                "WorkloadPriorityClass",
                "Topology",
            ):
                jsonschema.validate(doc, schema(doc["kind"], doc["apiVersion"]))


def test_kueue_waits_for_its_webhooks_and_the_trainer_crds(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    if not config.training.teams:
        pytest.skip("no teams")
    charts = {r["Properties"]["Release"]: (k, r) for k, r in _of(template, "Custom::AWSCDK-EKS-HelmChart").items()}
    _, kueue = charts["kueue"]
    assert kueue["Properties"]["Wait"] is True
    assert charts[versions.KUBEFLOW_TRAINER.release][0] in kueue["DependsOn"]


def test_karpenter_crds_come_from_their_own_chart_so_a_bump_upgrades_them(bp: tuple[str, Any, dict[str, Any]]) -> None:
    # Helm installs a chart's crds/ once and never upgrades them (Karpenter Upgrade Guide, "CRD Upgrades").
    _, _, template = bp
    charts = {r["Properties"]["Release"]: (k, r) for k, r in _of(template, "Custom::AWSCDK-EKS-HelmChart").items()}
    crd_id, crd = charts[versions.KARPENTER_CRD.release]
    assert crd["Properties"]["Repository"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert crd["Properties"]["Version"] == versions.KARPENTER.version
    assert crd["Properties"]["Namespace"] == "kube-system" and not crd["Properties"].get("SkipCrds")
    _, controller = charts["karpenter"]
    assert controller["Properties"]["SkipCrds"] is True
    assert crd_id in controller["DependsOn"]
    for resource in _of(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        if "NodePool" in json.dumps(resource["Properties"]["Manifest"]):
            assert crd_id in resource["DependsOn"]


def test_kueue_webhooks_survive_one_controller_pod_going(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    if not config.training.teams:
        pytest.skip("no teams")
    kueue = next(
        r for r in _of(template, "Custom::AWSCDK-EKS-HelmChart").values() if r["Properties"]["Release"] == "kueue"
    )
    values = kueue["Properties"]["Values"]
    manager = json.loads(values if isinstance(values, str) else _placeholders(values))["controllerManager"]
    assert manager["replicas"] == 2
    assert manager["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}


def test_readme_walkthrough_checks_huge_pages_and_tears_down_jobs_first() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Elastic capacity and team queues", 1)[1].split("\n## ", 1)[0]
    assert "kubectl get node -l karpenter.sh/nodepool=p5 -o jsonpath='{..allocatable.hugepages-2Mi}'" in section
    assert "kubectl -n training delete trainjobs --all" in section and "cdk destroy" in section
    assert "third eviction, deactivates it" in section and '{"spec":{"active":true}}' in section
    assert "meta.helm.sh/release-name=karpenter-crd" in section


def test_efa_pool_nodes_reach_fsx_and_get_the_efa_plugin(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    efa_groups = [k for k in _of(template, "AWS::EC2::SecurityGroup") if "Efa" in k]
    assert efa_groups
    lustre = [
        r["Properties"]
        for r in _of(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("FromPort") == 988
    ]
    assert any(p.get("SourceSecurityGroupId") == {"Fn::GetAtt": [efa_groups[0], "GroupId"]} for p in lustre)
    plugin = next(
        r
        for r in _of(template, "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == versions.EFA_DEVICE_PLUGIN.release
    )
    values = json.loads(plugin["Properties"]["Values"])
    assert "p5.48xlarge" in values["supportedInstanceLabels"]["values"]


def test_access_denies_the_node_launch_without_passrole(session: Session) -> None:
    name = next(iter(KARPENTER), None)
    if name is None:
        pytest.skip("no Karpenter blueprint in this session")
    stacks = access_cli.stacks_of(session.blueprints[name])
    before = evaluate(name, stacks)
    assert not before.denied and sum(c.kind == "karpenter" for c in before.calls) >= 30
    templates = copy.deepcopy(stacks.templates)
    for template in templates.values():
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::IAM::Policy":
                doc = resource["Properties"]["PolicyDocument"]
                doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "AllowPassingInstanceRole"]
    after = evaluate(name, type(stacks)(templates, stacks.region))
    assert {c.action for c in after.denied} == {"iam:PassRole"}
