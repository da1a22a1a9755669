"""The budget's scale-to-zero action on Karpenter NodePools (engine eks, and HyperPod's managed Karpenter on
hyperpod-eks): the real handler against a Kubernetes API stub over HTTPS (tests/training/kube_stub.py) with moto's
SNS, the RBAC it is granted against what it sends, and the synthesized function in the cluster's VPC with its
access entry, through every gate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mlstack.config import BlueprintConfig, load
from mlstack.design.cost import scale_to_zero_pools
from mlstack.plan.build import build_plan
from runtime.scale_to_zero import handler
from tests import variants
from tests.training.kube_stub import KubeStub, serve

REGION = "us-east-1"
CLUSTER = "eks-karpenter-training-cluster"
SECRET = "FOOBARSECRET"
"""The secret key moto's mock_aws puts in the environment: the credentials the handler signs its token with."""
BUDGET = {"monthly_usd": 50000, "thresholds_percent": [50, 80], "scale_to_zero_at_percent": 100}
EVENT = {"Records": [{"Sns": {"Subject": "AWS Budgets: eks-karpenter-training has exceeded your alert threshold"}}]}


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KubeStub, Any]]:
    """The stub serving pools p5 (32 GPUs) and trn (limits already 0 from an earlier run), moto's SNS with a queue
    subscribed to the alarm topic, and the handler's environment."""
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    stub = KubeStub(cluster=CLUSTER, secret=SECRET)
    stub.add_pool("p5", {"nvidia.com/gpu": "32"}, grace="60m")
    stub.add_pool("trn", {"aws.amazon.com/neuron": "0"})
    stub.add_claim("p5-abcde", "p5")
    stub.add_claim("p5-fghij", "p5")
    stub.add_claim("p5-old", "p5", deleting=True)
    stub.add_claim("other-x", "other")
    with serve(stub, tmp_path), mock_aws():
        sns, sqs = boto3.client("sns"), boto3.client("sqs")
        topic = sns.create_topic(Name="alarms")["TopicArn"]
        queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "false"})
        for name, value in {
            "CLUSTER_NAME": CLUSTER,
            "NODEGROUPS": "[]",
            "JOB_QUEUES": "[]",
            "COMPUTE_ENVIRONMENTS": "[]",
            "NODEPOOLS": json.dumps(["p5", "trn"]),
            "KUBE_ENDPOINT": stub.endpoint,
            "KUBE_CA": stub.ca_data,
            "NOTIFY_TOPIC_ARN": topic,
        }.items():
            monkeypatch.setenv(name, value)

        def messages() -> list[dict[str, Any]]:
            found = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
            return [json.loads(m["Body"]) for m in found]

        yield stub, messages


def test_the_pools_stop_and_their_nodeclaims_are_deleted_then_the_topic_is_told(kube: Any) -> None:
    stub, messages = kube
    result = handler.handler(EVENT)
    assert stub.pools["p5"]["spec"]["limits"] == {"nvidia.com/gpu": "0"}
    annotation = {"metadata": {"annotations": {handler.LIMITS_BEFORE: '{"nvidia.com/gpu": "32"}'}}}
    assert stub.patches == [
        ("p5", "application/merge-patch+json", {**annotation, "spec": {"limits": {"nvidia.com/gpu": "0"}}})
    ]
    # Limits first (no replacement node), then every claim of the pool; the draining one and the other pool's stay.
    assert [r for r in stub.requests if r[1] == "nodeclaims" and r[0] == "delete"] == [
        ("delete", "nodeclaims", "p5-abcde"),
        ("delete", "nodeclaims", "p5-fghij"),
    ]
    assert stub.requests.index(("patch", "nodepools", "p5")) < stub.requests.index(("delete", "nodeclaims", "p5-abcde"))
    assert "deletionTimestamp" not in stub.claims["other-x"]["metadata"]
    (message,) = messages()
    assert message["Subject"] == "mlstack: training capacity scaled to zero"
    text = message["Message"]
    assert "NodePool p5: limits" in text and "NodeClaim p5-abcde: deleted" in text
    # Deleting a claim does not evict a running job: the message says how long its node may still bill.
    assert "at the latest after the pool's terminationGracePeriod 60m" in text
    assert "NodePool trn: limits already 0" in text and "NodeClaim p5-old: already draining" in text
    assert """kubectl patch nodepool p5 --type merge -p '{"spec":{"limits":{"nvidia.com/gpu":"32"}}}'""" in text
    assert len(result["done"]) == 5


def test_a_second_budget_notification_changes_nothing(kube: Any) -> None:
    stub, messages = kube
    handler.handler(EVENT)
    sent = len(stub.requests)
    handler.handler(EVENT)
    again = stub.requests[sent:]
    assert {verb for verb, _, _ in again} == {"get", "list"}  # nothing patched or deleted twice
    assert stub.pools["p5"]["spec"]["limits"] == {"nvidia.com/gpu": "0"}
    text = messages()[-1]["Message"]
    # A retry (the first one timed out after the patch) still names the limits to give back.
    assert "NodePool p5: limits already 0" in text
    assert """kubectl patch nodepool p5 --type merge -p '{"spec":{"limits":{"nvidia.com/gpu":"32"}}}'""" in text


def test_a_pool_without_limits_gets_cpu_zero_and_a_retry_still_names_its_resume(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, messages = kube
    stub.add_pool("free", {})
    monkeypatch.setenv("NODEPOOLS", json.dumps(["free"]))
    handler.handler(EVENT)
    assert stub.pools["free"]["spec"]["limits"] == {"cpu": "0"}
    handler.handler(EVENT)
    text = messages()[-1]["Message"]
    assert "NodePool free: limits already 0" in text
    # Resuming removes the limit this function added (a merge patch with null deletes the key).
    assert """kubectl patch nodepool free --type merge -p '{"spec":{"limits":{"cpu":null}}}'""" in text


def test_a_refused_request_fails_visibly_and_the_other_pools_still_run(kube: Any) -> None:
    stub, messages = kube
    stub.fail[("delete", "nodeclaims")] = 403
    with pytest.raises(RuntimeError, match=r"Karpenter NodePools FAILED: RuntimeError: DELETE .*HTTP 403"):
        handler.handler(EVENT)
    (message,) = messages()
    assert message["Subject"] == "mlstack: scale to zero FAILED"
    assert "HTTP 403" in message["Message"]
    assert stub.pools["p5"]["spec"]["limits"] == {"nvidia.com/gpu": "0"}  # the limits went to 0 before


def test_the_api_refuses_a_token_not_signed_for_this_cluster(kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stub, _ = kube
    token = handler.eks_token("another-cluster", REGION)
    monkeypatch.setattr(handler, "eks_token", lambda cluster, region: token)
    with pytest.raises(RuntimeError, match=r"HTTP 401.*x-k8s-aws-id"):
        handler.handler(EVENT)
    assert stub.pools["p5"]["spec"]["limits"] == {"nvidia.com/gpu": "32"}


def test_the_api_server_certificate_must_be_the_cluster_ca(
    kube: Any, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    stub, _ = kube
    from tests.training.kube_stub import self_signed

    monkeypatch.setenv("KUBE_CA", self_signed(tmp_path_factory.mktemp("other-ca"))[2])
    with pytest.raises(RuntimeError, match="CERTIFICATE_VERIFY_FAILED"):
        handler.handler(EVENT)
    assert stub.requests == []


# --------------------------------------------------------------------------------------------- synthesized


def _karpenter_budget() -> BlueprintConfig:
    data = load("eks-karpenter-training").model_dump(exclude_unset=True)
    return BlueprintConfig.model_validate({**data, "name": "karpenter-budget", "budget": BUDGET})


def _hyperpod_karpenter_budget() -> BlueprintConfig:
    data = load("hyperpod-eks-teams").model_dump(exclude_unset=True)
    return BlueprintConfig.model_validate({**data, "name": "hyperpod-karpenter-budget", "budget": BUDGET})


VARIANTS = ("karpenter-budget", "hyperpod-karpenter-budget")
SESSION_VARIANTS = {"karpenter-budget": _karpenter_budget, "hyperpod-karpenter-budget": _hyperpod_karpenter_budget}
"""Synthesized by the run's synth process with cdk-nag and CDK's validation, like the shipped blueprints, and read
by the same cfn-lint, checkov, cfn-guard and asl-validator runs (tests/variants.py)."""


@pytest.fixture(scope="module")
def pooled(variants_session: Any) -> Any:
    return variants.only(variants_session, SESSION_VARIANTS)


def _resources(pooled: Any, name: str) -> dict[str, Any]:
    return dict(pooled.blueprints[name].templates["TrainingClusterStack"]["Resources"])


def _one(resources: dict[str, Any], kind: str, prefix: str = "BudgetScaleToZero") -> tuple[str, dict[str, Any]]:
    (found,) = [(k, r) for k, r in resources.items() if r["Type"] == kind and k.startswith(prefix)]
    return found


def test_budget_scale_to_zero_with_karpenter_is_offered() -> None:
    assert _karpenter_budget().budget is not None
    assert [p.name for p in scale_to_zero_pools(_karpenter_budget())] == ["p5"]
    assert [p.name for p in scale_to_zero_pools(_hyperpod_karpenter_budget())] == ["mlstack-hyperpod-p5"]


@pytest.mark.parametrize("name", VARIANTS)
def test_the_function_runs_in_the_vpc_and_reaches_the_api_endpoint_on_443(pooled: Any, name: str) -> None:
    resources = _resources(pooled, name)
    function_id, function = _one(resources, "AWS::Lambda::Function")
    group_id, _ = _one(resources, "AWS::EC2::SecurityGroup")
    vpc = function["Properties"]["VpcConfig"]
    assert vpc["SecurityGroupIds"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
    network = pooled.blueprints[name].templates["NetworkStack"]["Resources"]
    private = {k for k, r in network.items() if r["Type"] == "AWS::EC2::Subnet" and "Private" in k}
    assert len(vpc["SubnetIds"]) == len(private)
    assert all("PrivateSubnet" in json.dumps(s) for s in vpc["SubnetIds"])
    cluster = next(k for k, r in resources.items() if r["Type"] == "AWS::EKS::Cluster")
    ingress = [
        r["Properties"]
        for k, r in resources.items()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and k.startswith("BudgetScaleToZero")
    ]
    # One rule, into the control-plane group on the API endpoint's ENIs; none into the cluster group (on every node).
    assert [i["GroupId"] for i in ingress] == resources[cluster]["Properties"]["ResourcesVpcConfig"]["SecurityGroupIds"]
    assert all(
        (i["IpProtocol"], i["FromPort"], i["ToPort"], i["SourceSecurityGroupId"])
        == ("tcp", 443, 443, {"Fn::GetAtt": [group_id, "GroupId"]})
        for i in ingress
    )
    env = function["Properties"]["Environment"]["Variables"]
    assert env["KUBE_ENDPOINT"] == {"Fn::GetAtt": [cluster, "Endpoint"]}
    assert env["KUBE_CA"] == {"Fn::GetAtt": [cluster, "CertificateAuthorityData"]}
    assert env["CLUSTER_NAME"] == resources[cluster]["Properties"]["Name"]
    assert json.loads(env["NODEPOOLS"]) == [p.name for p in scale_to_zero_pools(_by_name(name))]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    assert any(
        "AWSLambdaVPCAccessExecutionRole" in json.dumps(p) for p in resources[role]["Properties"]["ManagedPolicyArns"]
    )
    assert function_id.startswith("BudgetScaleToZeroFunction")
    # What it calls from the private subnets: SNS (and on hyperpod-eks SageMaker) through the NAT gateway, or the
    # sagemaker.api interface endpoint (private DNS; its group admits the VPC's CIDR on 443); the token needs no call.
    assert [r for r in network.values() if r["Type"] == "AWS::EC2::NatGateway"]
    if name == "hyperpod-karpenter-budget":
        (endpoint,) = [
            r["Properties"]
            for r in network.values()
            if r["Type"] == "AWS::EC2::VPCEndpoint" and "sagemaker.api" in json.dumps(r["Properties"]["ServiceName"])
        ]
        assert endpoint["PrivateDnsEnabled"] is True


def _by_name(name: str) -> BlueprintConfig:
    return _karpenter_budget() if name == "karpenter-budget" else _hyperpod_karpenter_budget()


@pytest.mark.parametrize("name", VARIANTS)
def test_the_access_entry_maps_the_role_to_a_group_without_an_access_policy(pooled: Any, name: str) -> None:
    resources = _resources(pooled, name)
    _, entry = _one(resources, "AWS::EKS::AccessEntry")
    _, function = _one(resources, "AWS::Lambda::Function")
    props = entry["Properties"]
    assert props["KubernetesGroups"] == ["mlstack:budget-scale-to-zero"]
    assert props["Type"] == "STANDARD"
    assert "AccessPolicies" not in props
    assert props["PrincipalArn"] == function["Properties"]["Role"]


def _rbac(resources: dict[str, Any]) -> list[dict[str, Any]]:
    _, manifest = _one(resources, "Custom::AWSCDK-EKS-KubernetesResource")
    return list(json.loads(manifest["Properties"]["Manifest"]))


def test_rbac_grants_exactly_what_the_handler_sends(pooled: Any, kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stub, _ = kube
    resources = _resources(pooled, "karpenter-budget")
    # The synthesized function's own pool list (the stub serves one pool more: it must not be touched).
    monkeypatch.setenv(
        "NODEPOOLS", _one(resources, "AWS::Lambda::Function")[1]["Properties"]["Environment"]["Variables"]["NODEPOOLS"]
    )
    handler.handler(EVENT)
    sent = set(stub.requests)
    assert not [r for r in sent if r[2] == "trn"]
    cluster_role, binding = _rbac(resources)
    granted: set[tuple[str, str, str | None]] = set()
    for rule in cluster_role["rules"]:
        assert rule["apiGroups"] == ["karpenter.sh"]
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                granted |= {(verb, resource, n) for n in rule.get("resourceNames", [None])}

    def allowed(verb: str, resource: str, name: str | None) -> bool:
        return (verb, resource, None) in granted or (verb, resource, name) in granted

    assert all(allowed(*request) for request in sent), sent
    # Nothing more: every (verb, resource) granted is sent, the named pools are the blueprint's only.
    assert {(v, r) for v, r, _ in granted} == {(v, r) for v, r, _ in sent}
    assert {n for v, r, n in granted if r == "nodepools"} == {"p5"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "mlstack:budget-scale-to-zero"}
    ]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]


def test_the_variants_pass_the_gates(pooled: Any, gated: Any) -> None:
    # cdk-nag and CDK's validation at synth, then the run's cfn-lint, checkov and cfn-guard (tests/variants.py).
    assert {"NetworkStack", "TrainingClusterStack"} <= set(pooled.blueprints["karpenter-budget"].templates)
    assert variants.gate_problems(gated, pooled) == []


@pytest.mark.parametrize("name", VARIANTS)
def test_the_plan_counts_every_resource_and_names_the_resume_command(pooled: Any, name: str) -> None:
    from tests.plan.test_footprint import differences, plan_counts, template_counts

    plan = build_plan(_by_name(name))
    found = differences(plan_counts(plan), template_counts(pooled.blueprints[name].templates))
    assert not found, "\n".join(found)
    (section,) = [rows for title, rows in plan.details["sections"] if title == "Operations"]
    (pool,) = scale_to_zero_pools(_by_name(name))
    assert any(pool.resume_command in row for row in section)


@pytest.mark.parametrize("name", VARIANTS)
def test_mlstack_access_follows_the_pool_function_and_denies_none(pooled: Any, name: str) -> None:
    from mlstack.access import cli as access_cli
    from mlstack.access import evaluate

    report = evaluate(name, access_cli.stacks_of(pooled.blueprints[name]))
    function = [c for c in report.calls if "scale-to-zero" in c.what]
    assert function, sorted({c.what for c in report.calls})
    assert [(c.action, c.resource) for c in function if c.decision != "Allowed"] == []
    actions = {c.action for c in function}
    assert {"sns:Publish", "ec2:CreateNetworkInterface"} <= actions
    # HyperPod's managed Karpenter owns the groups' instances: the pools stop them, UpdateCluster is not called
    # (it would remove them without a drain) and the role may not call it.
    assert not {"sagemaker:DescribeCluster", "sagemaker:UpdateCluster"} & actions


def test_the_function_stops_the_pools_not_the_hyperpod_groups_under_managed_karpenter(pooled: Any) -> None:
    resources = _resources(pooled, "hyperpod-karpenter-budget")
    _, function = _one(resources, "AWS::Lambda::Function")
    env = function["Properties"]["Environment"]["Variables"]
    assert "HYPERPOD_GROUPS" not in env and env["NODEPOOLS"]
    assert "sagemaker:UpdateCluster" not in json.dumps(resources)


def test_the_variants_pass_the_iam_lint(pooled: Any) -> None:
    from tests.template_checks import iam_lint
    from tests.template_checks.resolve import session_stacks

    stacks = [(label, stack) for label, stack in session_stacks(pooled.blueprints) if "TrainingClusterStack" in label]
    assert len(stacks) == len(VARIANTS)
    findings, documents = iam_lint.lint_stacks(stacks)
    ours = [f for f in findings if "BudgetScaleToZero" in f.where]
    assert ours == [] and documents > 0
