"""`mlstack access` over every shipped blueprint (from the session's one synth), the evaluator, and the CLI."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from mlstack import cli
from mlstack.access import Report, evaluate
from mlstack.access import cli as access_cli
from mlstack.access.calls import KINDS, SOURCES
from mlstack.access.evaluate import evaluate_many
from mlstack.access.render import render, summary
from mlstack.access.resolve import Stacks
from mlstack.access.simulator import run_batch
from tests.access.known_denied import KNOWN_DENIED
from tests.synth import Session

# Roles that no run-time call of the blueprint uses: deploy-time custom-resource providers, the VPC flow-log
# delivery role, the EKS control plane's cluster role and the Studio user's role (a person's, not a service's).
# Deploy-time or service-managed roles: CDK's custom-resource providers (the kubectl handler, the HyperPod chart
# installer's framework function, which only invokes the installer), the flow-log delivery role, the EKS cluster
# role, Studio users (people, not services).
NOT_RUN_TIME = (
    "Custom",
    "NetworkVpcFlowLog",
    "TrainingClusterKubectlProvider",
    "TrainingClusterRole",
    "ServingClusterKubectlProvider",  # the serving cluster (inference engine eks): same parts as the training one
    "ServingClusterRole",
    "StudioUser",
    "HyperPodChartProviderframework",
    # CDK's provider framework of the HyperPod autoscaling wait (onEvent, isComplete, onTimeout, the waiter).
    "HyperPodAutoscalingReadyProvider",
    # The custom resource that creates or takes over Fluent Bit's log group: deploy time only (its policy is
    # asserted statement by statement in tests/training/test_observability.py).
    "ObservabilityStepLogGroupRole",
)


@pytest.fixture(scope="module")
def reports(session: Session) -> dict[str, Report]:
    return evaluate_many({name: access_cli.stacks_of(item) for name, item in session.blueprints.items()})


def test_denied_calls_are_exactly_the_known_ones(reports: dict[str, Report]) -> None:
    problems: list[str] = []
    for name, report in reports.items():
        known = {(p, a, r) for p, a, r, _item in KNOWN_DENIED.get(name, set())}
        denied = {c.key() for c in report.denied}
        problems += [f"{name}: newly denied: {d} ({_why(report, d)})" for d in sorted(denied - known)]
        problems += [f"{name}: no longer denied, remove from KNOWN_DENIED: {d}" for d in sorted(known - denied)]
    assert not problems, "\n".join(problems)


def test_one_simulator_run_decides_each_blueprint_like_its_own_run(
    session: Session, reports: dict[str, Report]
) -> None:
    # The module's reports come from one run over every blueprint; the last two (not at the batch's start), each in
    # a run of its own.
    names = list(reports)[-2:]
    assert names
    for name in names:
        alone = evaluate(name, access_cli.stacks_of(session.blueprints[name]))
        decided = [(c.key(), c.decision, c.statement) for c in reports[name].calls]
        assert decided == [(c.key(), c.decision, c.statement) for c in alone.calls]
        assert any(c.allowed for c in alone.calls)


def _why(report: Report, key: tuple[str, str, str]) -> str:
    return next(f"{c.decision}: {c.statement}" for c in report.calls if c.key() == key)


def test_no_call_errors_and_every_call_cites_a_page(reports: dict[str, Report]) -> None:
    for name, report in reports.items():
        errors = [(c.action, c.resource, c.statement) for c in report.calls if c.decision == "Error"]
        assert not errors, f"{name}: the simulator rejected {errors}"
        assert all(SOURCES[c.source][1].startswith("https://docs.aws.amazon.com/") for c in report.calls)


def test_every_role_a_service_uses_at_run_time_is_a_principal(reports: dict[str, Report], session: Session) -> None:
    for name, report in reports.items():
        principals = {p.logical_id for p in report.principals}
        for template in session.blueprints[name].templates.values():
            for lid, resource in template["Resources"].items():
                if resource["Type"] == "AWS::IAM::Role" and not lid.startswith(NOT_RUN_TIME):
                    assert lid in principals, f"{name}: role {lid} is used at run time but has no calls in the table"


def test_table_kinds_cover_the_principals_of_the_issue() -> None:
    wanted = {"sagemaker-job", "sagemaker-pipeline", "sagemaker-endpoint", "lambda", "step-functions", "hyperpod"}
    wanted |= {"batch-instance", "batch-job", "eks-node", "eks-pod-identity", "eks-admin-host"}
    assert wanted <= set(KINDS)
    assert all(spec.source in SOURCES or spec.source == "{source}" for _, specs in KINDS.values() for spec in specs)


def _inference_async(session: Session) -> tuple[Stacks, dict[str, Any]]:
    if "inference-async" not in session.blueprints:
        pytest.skip("inference-async is not in this session (MLSTACK_TEST_BLUEPRINTS)")
    stacks = access_cli.stacks_of(session.blueprints["inference-async"])
    return Stacks(copy.deepcopy(stacks.templates), stacks.region), stacks.templates


def test_removing_the_statement_that_allows_a_call_denies_it(session: Session) -> None:
    stacks, _ = _inference_async(session)
    before = evaluate("inference-async", stacks)
    model_read = next(c for c in before.calls if c.action == "s3:GetObject" and c.resource.endswith("model.tar.gz"))
    assert model_read.allowed
    removed = 0
    for _stack, lid, resource in stacks.all_resources():
        if resource["Type"] == "AWS::IAM::Policy" and lid in model_read.statement:
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            kept = [s for s in statements if "s3:GetObject" not in json.dumps(s["Action"])]
            removed += len(statements) - len(kept)
            resource["Properties"]["PolicyDocument"]["Statement"] = kept
    assert removed == 1
    after = evaluate("inference-async", stacks)
    denied = {c.key() for c in after.denied}
    assert denied == {model_read.key()}


def test_a_key_policy_without_the_account_denies_what_the_identity_policy_allows(session: Session) -> None:
    stacks, _ = _inference_async(session)
    for _stack, _lid, resource in stacks.all_resources():
        if resource["Type"] == "AWS::KMS::Key":
            statements = resource["Properties"]["KeyPolicy"]["Statement"]
            resource["Properties"]["KeyPolicy"]["Statement"] = [s for s in statements if s["Action"] != "kms:*"]
    denied = {c.action for c in evaluate("inference-async", stacks).denied}
    assert {"kms:Decrypt", "kms:GenerateDataKey"} <= denied


def _request(action: str, resource: str, statement: dict[str, Any], context: dict[str, str]) -> dict[str, Any]:
    return {
        "principal": "arn:aws:iam::123456789012:role/Job",
        "action": action,
        "resource": resource,
        "account": "123456789012",
        "context": context,
        "identity": [{"name": "p", "policy": {"Version": "2012-10-17", "Statement": [statement]}}],
        "managed": [],
        "boundary": [],
        "resourcePolicy": None,
    }


def test_conditions_use_the_context_keys_the_call_carries() -> None:
    bucket = "arn:aws:s3:::b"
    listing: dict[str, Any] = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket}
    listing["Condition"] = {"StringLike": {"s3:prefix": ["runs/*"]}}
    deny_unless_tls: dict[str, Any] = {"Sid": "Tls", "Effect": "Deny", "Action": "s3:*", "Resource": "*"}
    deny_unless_tls["Condition"] = {"Bool": {"aws:SecureTransport": "false"}}
    results = run_batch(
        [
            _request("s3:ListBucket", bucket, listing, {"s3:prefix": "runs/1/"}),
            _request("s3:ListBucket", bucket, listing, {"s3:prefix": "code/x.py"}),
            _request("s3:GetObject", f"{bucket}/k", deny_unless_tls, {"aws:SecureTransport": "false"}),
        ]
    )
    assert [r["decision"] for r in results] == ["Allowed", "ImplicitlyDenied", "ExplicitlyDenied"]
    assert "Tls" in results[2]["statement"]


def test_cli_prints_tables_and_exits_1_on_a_denied_call(
    reports: dict[str, Report], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "mlops-pipeline" if "mlops-pipeline" in reports else next(iter(reports))
    clean = reports[name]
    assert not clean.denied
    monkeypatch.setattr(access_cli, "check", lambda _path: clean)
    assert cli.main(["access", name]) == 0
    out = capsys.readouterr().out
    assert summary(clean) in out
    assert "SageMaker" in out or "EKS" in out or "Lambda" in out
    # The same report with one call denied (as a removed statement would make it): exit 1, in text and JSON.
    first = clean.calls[0]
    seeded = dataclasses.replace(
        clean, calls=[dataclasses.replace(first, decision="ImplicitlyDenied"), *clean.calls[1:]]
    )
    monkeypatch.setattr(access_cli, "check", lambda _path: seeded)
    assert cli.main(["access", name]) == 1
    assert "DENIED" in capsys.readouterr().out
    status = cli.main(["access", name, "--json"])
    assert status == 1
    data = json.loads(capsys.readouterr().out)
    assert data["denied"] == 1
    assert all(
        {"action", "resource", "decision", "statement", "source_url"} <= set(c)
        for p in data["principals"]
        for c in p["calls"]
    )


def test_render_has_one_table_per_principal(reports: dict[str, Report]) -> None:
    for report in reports.values():
        text = render(report)
        assert all(p.label in text for p in report.principals)


def test_plan_shows_the_access_summary(
    reports: dict[str, Report], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = next(iter(reports))
    monkeypatch.setattr(access_cli, "check", lambda _path: reports[name])
    assert cli.main(["plan", name, "--access"]) == 0
    assert summary(reports[name]) in capsys.readouterr().out
    assert cli.main(["plan", name, "--access", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["access"]["denied"] == len(reports[name].denied)
    assert cli.main(["plan", name]) == 0
    assert f"mlstack access {name}" in capsys.readouterr().out


def test_a_permission_boundary_limits_what_the_identity_policy_allows(session: Session) -> None:
    stacks, _ = _inference_async(session)
    stack = next(s for s in stacks.templates if s.endswith("InferenceStack"))
    resources = stacks.templates[stack]["Resources"]
    only_s3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    resources["Boundary"] = {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": only_s3}}
    role = next(lid for lid, r in resources.items() if r["Type"] == "AWS::IAM::Role")
    resources[role]["Properties"]["PermissionsBoundary"] = {"Ref": "Boundary"}
    report = evaluate("inference-async", stacks)
    denied = {c.action for c in report.denied}
    assert "ecr:BatchGetImage" in denied and "kms:Decrypt" in denied
    assert not any(c.action.startswith("s3:") for c in report.denied)


def test_the_simulator_script_ships_with_the_package() -> None:
    import tomllib

    from tests.synth import ROOT

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "access/*.mjs" in data["tool"]["setuptools"]["package-data"]["mlstack"]
    assert (ROOT / "mlstack" / "access" / "simulate.mjs").is_file()
