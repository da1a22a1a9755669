"""hyperpod-eks-teams from the one session synth: HyperPod task governance (add-on, cluster policy, a compute
allocation per team) and HyperPod autoscaling (AutoScaling, ClusterRole, continuous provisioning, the pools), as the
templates hold them and in the order CloudFormation creates them; and the rendered job's labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mlstack.access import cli as access_cli
from mlstack.access.evaluate import evaluate
from mlstack.constructs.training import versions
from mlstack.k8s.job import render_job
from tests.blueprints.hyperpod_teams import NAME, of_type, one_of_type, teams_template
from tests.synth import Session
from tests.training.crds import schema

CFN_SCHEMAS = Path(jsonschema.__file__).parents[1] / "cfnlint" / "data" / "schemas"


_of = of_type
_one = one_of_type


@pytest.fixture
def template(session: Session) -> dict[str, Any]:
    return teams_template(session)


def _cfn_schema(type_name: str) -> dict[str, Any]:
    """The CloudFormation resource schema cfn-lint bundles (us-east-1), definitions inlined for jsonschema."""
    providers = json.loads((CFN_SCHEMAS / "providers" / "us-east-1.json").read_text(encoding="utf-8"))
    path = CFN_SCHEMAS / "resources" / f"{providers[type_name]}.json"
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _python_patterns(node: Any) -> Any:
    """The schema without the Unicode-class patterns (`\\p{L}`) Python's `re` cannot compile (free text fields)."""
    if isinstance(node, dict):
        return {
            k: _python_patterns(v)
            for k, v in node.items()
            if not (k == "pattern" and isinstance(v, str) and "\\p{" in v)
        }
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


def _props_schema(type_name: str) -> dict[str, Any]:
    full = _python_patterns(_cfn_schema(type_name))
    writable = {k: v for k, v in full["properties"].items() if f"/properties/{k}" not in full["readOnlyProperties"]}
    return {
        "type": "object",
        "properties": writable,
        "required": full["required"],
        "additionalProperties": False,
        "definitions": full["definitions"],
    }


def test_compute_allocations_as_the_cloudformation_schema_has_them(template: dict[str, Any]) -> None:
    quotas = _of(template, "AWS::SageMaker::ComputeQuota")
    by_team = {r["Properties"]["ComputeQuotaTarget"]["TeamName"]: r["Properties"] for r in quotas.values()}
    assert set(by_team) == {"research", "product"}
    research = by_team["research"]
    # CPU and memory explicit (2 nodes' and 1 node's job pods), not SageMaker's ratio of a cluster at 0 nodes.
    assert research["ComputeQuotaConfig"] == {
        "ComputeQuotaResources": [
            {"InstanceType": "ml.p5.48xlarge", "Accelerators": 16, "VCpu": 344, "MemoryInGiB": 3276}
        ],
        "ResourceSharingConfig": {
            "Strategy": "LendAndBorrow",
            "BorrowLimit": 50,
            "AbsoluteBorrowLimits": [
                {"InstanceType": "ml.p5.48xlarge", "Accelerators": 8, "VCpu": 172, "MemoryInGiB": 1638}
            ],
        },
        "PreemptTeamTasks": "LowerPriority",
    }
    assert research["ComputeQuotaTarget"] == {"TeamName": "research", "FairShareWeight": 1}
    assert research["ActivationState"] == "Enabled"
    assert research["Name"] == "hyperpod-eks-teams-research"
    schema_ = _props_schema("AWS::SageMaker::ComputeQuota")
    for props in by_team.values():
        concrete = {**props, "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/a1b2c3d4e5f6"}
        jsonschema.validate(concrete, schema_)


def test_cluster_policy_priorities_and_fair_share(template: dict[str, Any]) -> None:
    _, policy = _one(template, "AWS::SageMaker::ClusterSchedulerConfig")
    config = policy["Properties"]["SchedulerConfig"]
    assert config["PriorityClasses"] == [
        {"Name": "inference", "Weight": 100},
        {"Name": "training", "Weight": 50},
        {"Name": "experiments", "Weight": 10},
    ]
    assert config["FairShare"] == "Enabled"
    concrete = {**policy["Properties"], "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/a1b2c3d4e5f6"}
    concrete.pop("Tags")
    jsonschema.validate(concrete, _props_schema("AWS::SageMaker::ClusterSchedulerConfig"))


def test_governance_is_created_in_order(template: dict[str, Any]) -> None:
    """HyperPod cluster and system nodes -> add-on (its Kueue) -> cluster policy -> allocations -> the job team's
    namespace, its FSx claim and job ConfigMap."""
    cluster, _ = _one(template, "AWS::SageMaker::Cluster")
    addons = {r["Properties"]["AddonName"]: (k, r) for k, r in _of(template, "AWS::EKS::Addon").items()}
    addon_id, addon = addons[versions.HYPERPOD_TASK_GOVERNANCE]
    assert addon["Properties"]["AddonVersion"] == versions.HYPERPOD_TASK_GOVERNANCE_VERSION
    assert cluster in addon["DependsOn"]
    policy_id, policy = _one(template, "AWS::SageMaker::ClusterSchedulerConfig")
    assert addon_id in policy["DependsOn"]
    quotas = _of(template, "AWS::SageMaker::ComputeQuota")
    assert all(policy_id in q["DependsOn"] for q in quotas.values())
    research = next(k for k, q in quotas.items() if q["Properties"]["ComputeQuotaTarget"]["TeamName"] == "research")
    manifests = _of(template, "Custom::AWSCDK-EKS-KubernetesResource")
    namespace = next(
        r
        for r in manifests.values()
        if isinstance(r["Properties"]["Manifest"], str)
        and json.loads(r["Properties"]["Manifest"])[0]["kind"] == "Namespace"
    )
    assert research in namespace["DependsOn"]
    # HyperPod made the namespace: the stack applies (not creates) it and never deletes it.
    assert namespace["Properties"]["Overwrite"] is True
    assert namespace["DeletionPolicy"] == "RetainExceptOnCreate"
    assert json.loads(namespace["Properties"]["Manifest"])[0]["metadata"]["name"] == "hyperpod-ns-research"
    # No self-installed Kueue: the add-on refuses to install over one.
    releases = {r["Properties"]["Release"] for r in _of(template, "Custom::AWSCDK-EKS-HelmChart").values()}
    assert "kueue" not in releases


def test_autoscaling_cluster(template: dict[str, Any]) -> None:
    _, cluster = _one(template, "AWS::SageMaker::Cluster")
    props = cluster["Properties"]
    assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert props["NodeProvisioningMode"] == "Continuous"
    assert props["NodeRecovery"] == "Automatic"
    role_id = props["ClusterRole"]["Fn::GetAtt"][0]
    assert [(g["InstanceCount"], g.get("OnStartDeepHealthChecks")) for g in props["InstanceGroups"]] == [(0, None)]
    role = template["Resources"][role_id]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "hyperpod.sagemaker.amazonaws.com"}
    policy_id, policy = next(
        (k, r) for k, r in _of(template, "AWS::IAM::Policy").items() if r["Properties"]["Roles"] == [{"Ref": role_id}]
    )
    assert policy_id in cluster["DependsOn"]  # the role can scale before the cluster takes it
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["ScaleClusterNodes"]["Action"] == [
        "sagemaker:BatchAddClusterNodes",
        "sagemaker:BatchDeleteClusterNodes",
    ]
    assert statements["VolumeKeyGrants"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    assert "Bool" not in statements["DescribeVolumeKey"]["Condition"]
    assert set(statements) == {"ScaleClusterNodes", "VolumeKeyGrants", "DescribeVolumeKey"}


def test_pools_after_the_cluster_and_valid(template: dict[str, Any]) -> None:
    cluster, _ = _one(template, "AWS::SageMaker::Cluster")
    manifests = _of(template, "Custom::AWSCDK-EKS-KubernetesResource")
    pools = next(r for r in manifests.values() if "HyperpodNodeClass" in json.dumps(r["Properties"]["Manifest"]))
    assert cluster in pools["DependsOn"]
    docs = json.loads(pools["Properties"]["Manifest"])
    node_class, node_pool = docs
    for doc in docs:  # without the label CDK's manifest pruning adds
        labels = doc["metadata"].pop("labels")
        assert all(k.startswith("aws.cdk.eks/prune-") for k in labels)
    assert node_class == {
        "apiVersion": "karpenter.sagemaker.amazonaws.com/v1",
        "kind": "HyperpodNodeClass",
        "metadata": {"name": "mlstack-hyperpod-p5"},
        "spec": {"instanceGroups": ["p5"]},
    }
    spec = node_pool["spec"]
    assert spec["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.sagemaker.amazonaws.com",
        "kind": "HyperpodNodeClass",
        "name": "mlstack-hyperpod-p5",
    }
    assert spec["limits"] == {"nvidia.com/gpu": "32"}
    assert spec["template"]["metadata"]["labels"] == {"mlstack.io/node-group": "p5"}
    # Only the requirement keys HyperPod's Karpenter provider supports ("Create a NodePool").
    keys = {r["key"] for r in spec["template"]["spec"]["requirements"]}
    assert keys <= {"node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "kubernetes.io/arch"}
    jsonschema.validate(node_pool, schema("NodePool", "karpenter.sh/v1"))


def test_rendered_job_is_queued_by_task_governance(session: Session) -> None:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} is not in this session")
    (job,) = render_job(session.blueprints[NAME].config, "image")
    assert job["metadata"]["namespace"] == "hyperpod-ns-research"
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue",
        "kueue.x-k8s.io/priority-class": "training-priority",
    }
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert "sagemaker.amazonaws.com/node-health-status" not in master["spec"]["nodeSelector"]


def test_access_follows_the_autoscaler(session: Session) -> None:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} is not in this session")
    report = evaluate(NAME, access_cli.stacks_of(session.blueprints[NAME]))
    scaler = [c for c in report.calls if c.action.startswith("sagemaker:Batch")]
    assert {c.action for c in scaler} == {"sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"}
    assert all(c.allowed for c in scaler)
    assert not report.denied
