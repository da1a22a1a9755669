"""The `eks-llm-serving` templates: what each run-time principal may do, the add-ons and charts, and that the
plan describes every resource."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mlstack.config import load
from mlstack.constructs.training import versions
from mlstack.design.footprint.inference import eks_inference_stack
from mlstack.plan import build_plan
from tests.synth import Session

NAME = "eks-llm-serving"


@pytest.fixture(scope="module")
def templates(session: Session) -> dict[str, dict[str, Any]]:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    return session.blueprints[NAME].templates


@pytest.fixture(scope="module")
def serving(templates: dict[str, dict[str, Any]]) -> Template:
    return Template.from_json(templates["InferenceStack"])


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_the_plan_describes_every_resource_of_the_stack() -> None:
    # The counts are held equal to the template by tests/plan/test_footprint.py (the footprint is `stack_parts`);
    # here: each of them is a described row (with its reason), none left to the supporting rows.
    rows = [r for r in build_plan(load(NAME)).resources if r.stack == "InferenceStack"]
    assert rows and not [r for r in rows if r.supporting]
    config = load(NAME)
    assert config.inference_eks is not None
    found: Counter[str | None] = Counter()
    for r in rows:
        found[r.type] += r.count
    assert found == eks_inference_stack(config.inference_eks)


def test_the_mountpoint_driver_runs_on_gpu_nodes_and_reads_only_the_weights_prefix(
    serving: Template, templates: dict[str, dict[str, Any]]
) -> None:
    serving.has_resource_properties(
        "AWS::EKS::Addon",
        {"AddonName": versions.MOUNTPOINT_S3_CSI, "ConfigurationValues": '{"node":{"tolerateAllTaints":true}}'},
    )
    serving.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {"Namespace": "kube-system", "ServiceAccount": "s3-csi-driver-sa", "RoleArn": Match.any_value()},
    )
    policy = templates["InferenceStack"]["Resources"]["MountpointRoleDefaultPolicyB6DF8000"]["Properties"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    assert set(statements) == {"ReadWeights", "ListWeights", "DecryptWeights"}
    assert statements["ReadWeights"]["Action"] == "s3:GetObject"
    assert statements["ListWeights"]["Condition"] == {
        "StringLike": {"s3:prefix": ["llama-3-1-8b-instruct/", "llama-3-1-8b-instruct/*"]}
    }
    assert statements["DecryptWeights"]["Condition"] == {
        "StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}
    }


def test_the_servers_read_only_the_api_key_which_the_project_key_encrypts(
    serving: Template, templates: dict[str, dict[str, Any]]
) -> None:
    resources = templates["InferenceStack"]["Resources"]
    secret = resources["ApiKeyF9DDEE66"]["Properties"]
    assert "Fn::GetStackOutput" in secret["KmsKeyId"]  # the NetworkStack's project key
    assert secret["GenerateSecretString"]["PasswordLength"] == 48
    serving.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "serving", "ServiceAccount": "vllm"}
    )
    statements = resources["ServerRoleDefaultPolicyA82E260E"]["Properties"]["PolicyDocument"]["Statement"]
    assert [s["Sid"] for s in statements] == ["ReadApiKey", "DecryptApiKey"]
    assert statements[0]["Resource"] == {"Ref": "ApiKeyF9DDEE66"}


def test_a_serving_cluster_gets_keda_and_the_gpu_plugin_but_no_trainer(templates: dict[str, dict[str, Any]]) -> None:
    charts = {
        r["Properties"]["Chart"]: r["Properties"]
        for r in _of_type(templates["InferenceStack"], "Custom::AWSCDK-EKS-HelmChart").values()
    }
    assert set(charts) == {"keda", "nvidia-device-plugin", "karpenter", "karpenter-crd"}
    assert (
        charts["keda"]["Version"] == versions.KEDA.version and charts["keda"]["Repository"] == versions.KEDA.repository
    )


def test_the_gpu_nodes_come_from_karpenter_not_a_node_group(templates: dict[str, dict[str, Any]]) -> None:
    # capacity_manager karpenter: only the system node group is an EKS node group; the GPU nodes are the pool's
    # (its manifests: tests/inference_eks/test_autoscaling.py).
    (group,) = _of_type(templates["InferenceStack"], "AWS::EKS::Nodegroup").values()
    assert group["Properties"]["Labels"] == {"mlstack.io/node-group": "system"}


def test_private_subnets_are_tagged_for_internal_load_balancers(templates: dict[str, dict[str, Any]]) -> None:
    subnets = _of_type(templates["NetworkStack"], "AWS::EC2::Subnet")
    private = [r for r in subnets.values() if not r["Properties"].get("MapPublicIpOnLaunch")]
    tagged = [
        r
        for r in private
        if {"Key": "kubernetes.io/role/internal-elb", "Value": "1"} in r["Properties"].get("Tags", [])
    ]
    assert len(tagged) == 2


def test_the_admin_host_can_send_the_first_request(templates: dict[str, dict[str, Any]]) -> None:
    group = templates["InferenceStack"]["Resources"]["AdminHostSecurityGroup96D57B1B"]["Properties"]
    assert {
        "CidrIp": "10.30.0.0/16",
        "Description": "the endpoints' internal NLBs",
        "FromPort": 8000,
        "IpProtocol": "tcp",
        "ToPort": 8000,
    } in group["SecurityGroupEgress"]
    policy = templates["InferenceStack"]["Resources"]["AdminHostRoleDefaultPolicyAE3E73DC"]["Properties"]
    assert "ReadApiKey" in [s.get("Sid") for s in policy["PolicyDocument"]["Statement"]]


def test_pod_identity_exists_before_the_pods_that_need_it_are_admitted(templates: dict[str, dict[str, Any]]) -> None:
    # The Pod Identity webhook injects credentials only into pods created after the association exists.
    resources = templates["InferenceStack"]["Resources"]
    addon = next(r for r in resources.values() if r["Properties"].get("AddonName") == versions.MOUNTPOINT_S3_CSI)
    assert {"MountpointPodIdentity", "MountpointRoleDefaultPolicyB6DF8000"} <= set(addon["DependsOn"])
    server = resources["ServingClustermanifestChatServerF61D9B06"]
    assert {"ServerPodIdentity", "ServerRoleDefaultPolicyA82E260E"} <= set(server["DependsOn"])
    assert "ServingClustermanifestChatWeightsF1AE3290" in server["DependsOn"]
    scaler = resources["ServingClustermanifestChatScaler01C1EA08"]
    assert "ServingClusterchartKedaChart1CA82A09" in scaler["DependsOn"]


def test_keda_is_installed_without_admission_webhooks(templates: dict[str, dict[str, Any]]) -> None:
    # The chart is not waited for: a ScaledObject applied next would meet a webhook with no pod behind it.
    chart = templates["InferenceStack"]["Resources"]["ServingClusterchartKedaChart1CA82A09"]["Properties"]
    assert chart["Values"] == '{"webhooks":{"enabled":false}}'
