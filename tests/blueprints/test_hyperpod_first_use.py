"""hyperpod-eks-teams, what the first create and the first job need beyond the resources themselves: the pools wait
for HyperPod's autoscaling and its HyperpodNodeClass CRD, the wait's role may only describe this cluster, and the
job's requests fit its team's quota (also tests/k8s for the rendered pods)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_kms as kms

from mlstack.access import cli as access_cli
from mlstack.access.evaluate import evaluate
from mlstack.constructs.training.hyperpod_ready import HyperPodAutoscalingReady
from mlstack.k8s.job import render_job
from tests.blueprints.hyperpod_teams import NAME, of_type, one_of_type, teams_template
from tests.synth import Session

_of = of_type
_one = one_of_type


@pytest.fixture
def template(session: Session) -> dict[str, Any]:
    return teams_template(session)


def test_pools_wait_for_autoscaling_in_service_then_the_crd(template: dict[str, Any]) -> None:
    """HyperPod installs the HyperpodNodeClass CRD only once AutoScaling is InService; CDK's apply handler would
    fail `no matches for kind` at once and roll the whole first create back."""
    cluster, _ = _one(template, "AWS::SageMaker::Cluster")
    ready_id, ready = _one(template, "Custom::HyperPodAutoscalingReady")
    assert ready["Properties"]["ClusterArn"] == {"Fn::GetAtt": [cluster, "ClusterArn"]}
    assert 30 * 60 <= int(ready["Properties"]["ServiceTimeout"]) <= 3600
    crd_id, crd = _one(template, "Custom::AWSCDK-EKS-KubernetesObjectValue")
    assert crd["Properties"]["ObjectType"] == "customresourcedefinition"
    assert crd["Properties"]["ObjectName"] == "hyperpodnodeclasses.karpenter.sagemaker.amazonaws.com"
    assert "Established" in crd["Properties"]["JsonPath"]
    assert ready_id in crd["DependsOn"]
    manifests = _of(template, "Custom::AWSCDK-EKS-KubernetesResource")
    pools = next(r for r in manifests.values() if "HyperpodNodeClass" in json.dumps(r["Properties"]["Manifest"]))
    assert crd_id in pools["DependsOn"]
    # The waiter: isComplete every minute, for at least 30 minutes, within the custom resource's ServiceTimeout.
    _, machine = _one(template, "AWS::StepFunctions::StateMachine")
    definition = "".join(p for p in machine["Properties"]["DefinitionString"]["Fn::Join"][1] if isinstance(p, str))
    retry = json.loads(definition.split('"Retry":')[1].split(',"Catch"')[0])[0]
    total = retry["IntervalSeconds"] * retry["MaxAttempts"]
    assert retry["IntervalSeconds"] == 60
    assert 30 * 60 <= total < int(ready["Properties"]["ServiceTimeout"])


def test_wait_role_describes_this_cluster_only(template: dict[str, Any]) -> None:
    cluster, _ = _one(template, "AWS::SageMaker::Cluster")
    functions = {
        r["Properties"]["Handler"]: r
        for r in _of(template, "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler", "").startswith("handler.")
        and r["Properties"].get("Environment", {}).get("Variables", {}).get("HYPERPOD_CLUSTER") == NAME
    }
    assert set(functions) == {"handler.on_event", "handler.is_complete"}
    (role_id,) = {r["Properties"]["Role"]["Fn::GetAtt"][0] for r in functions.values()}
    (policy,) = [
        r for r in _of(template, "AWS::IAM::Policy").values() if r["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    sagemaker = [s for s in statements if "sagemaker" in json.dumps(s["Action"])]
    assert sagemaker == [
        {"Action": "sagemaker:DescribeCluster", "Effect": "Allow", "Resource": {"Fn::GetAtt": [cluster, "ClusterArn"]}}
    ]


def test_access_allows_the_wait(session: Session) -> None:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} is not in this session")
    report = evaluate(NAME, access_cli.stacks_of(session.blueprints[NAME]))
    described = [c for c in report.calls if c.action == "sagemaker:DescribeCluster"]
    assert described and all(c.allowed for c in described)
    assert not report.denied


def test_wait_longer_than_the_service_timeout_is_refused() -> None:
    stack = Stack(App(), "S")
    with pytest.raises(ValueError, match="total_timeout: 58 minutes is more than the 55"):
        HyperPodAutoscalingReady(
            stack,
            "Ready",
            cluster_name="c",
            cluster_arn="arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
            key=kms.Key(stack, "Key"),
            total_timeout=Duration.minutes(58),
        )


def _quantity(value: str | int) -> float:
    text = str(value)
    return float(text.removesuffix("Gi")) if text.endswith("Gi") else float(text)


def test_a_teams_job_at_its_quota_fits_the_quotas_cpu_and_memory(session: Session, template: dict[str, Any]) -> None:
    """The rendered job of team research asks for its whole quota of GPUs: its pods' CPU and memory must fit the
    quota's VCpu and MemoryInGiB too, or Kueue never admits it."""
    (job,) = render_job(session.blueprints[NAME].config, "image")
    totals = {"nvidia.com/gpu": 0.0, "cpu": 0.0, "memory": 0.0}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        requests = replica["template"]["spec"]["containers"][0]["resources"]["requests"]
        for name in totals:
            totals[name] += replica["replicas"] * _quantity(requests[name])
    quotas = _of(template, "AWS::SageMaker::ComputeQuota")
    (research,) = [
        q["Properties"]["ComputeQuotaConfig"]["ComputeQuotaResources"]
        for q in quotas.values()
        if q["Properties"]["ComputeQuotaTarget"]["TeamName"]
        == job["metadata"]["namespace"].removeprefix("hyperpod-ns-")
    ]
    (quota,) = research
    assert totals["nvidia.com/gpu"] == quota["Accelerators"] == 16
    assert totals["cpu"] <= quota["VCpu"]
    assert totals["memory"] <= quota["MemoryInGiB"]


def _containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"]["containers"][0] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def test_job_under_managed_schedulers_requests_no_huge_pages(session: Session) -> None:
    """Task governance's Kueue and HyperPod's Karpenter would hold a pod that requests a resource they do not
    model: no hugepages-2Mi request, libfabric on regular pages, the EFA devices still requested."""
    if NAME not in session.blueprints:  # a MLSTACK_TEST_BLUEPRINTS selection without it
        pytest.skip(f"{NAME} is not in this session")
    (job,) = render_job(session.blueprints[NAME].config, "image")
    for container in _containers(job):
        for kind in ("requests", "limits"):
            assert "hugepages-2Mi" not in container["resources"][kind]
            assert container["resources"][kind]["vpc.amazonaws.com/efa"] == 32
        assert {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"} in container["env"]


def test_job_without_managed_schedulers_keeps_huge_pages(session: Session) -> None:
    other = "hyperpod-eks-training"
    if other not in session.blueprints:
        pytest.skip(f"{other} is not in this session")
    (job,) = render_job(session.blueprints[other].config, "image")
    for container in _containers(job):
        assert container["resources"]["requests"]["hugepages-2Mi"] == "5120Mi"
        assert all(e["name"] != "FI_EFA_USE_HUGE_PAGE" for e in container["env"])


def test_allocations_one_after_another_and_tagged(template: dict[str, Any]) -> None:
    quotas = {
        q["Properties"]["ComputeQuotaTarget"]["TeamName"]: (k, q)
        for k, q in _of(template, "AWS::SageMaker::ComputeQuota").items()
    }
    research_id, _ = quotas["research"]
    _, product = quotas["product"]
    assert research_id in product["DependsOn"]
    for _, quota in quotas.values():
        assert {"Key": "mlstack:blueprint", "Value": NAME} in quota["Properties"]["Tags"]
