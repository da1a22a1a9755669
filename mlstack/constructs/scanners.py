"""Acknowledging a policy scanner's finding on one resource, with a reason a reviewer can check.

Two scanners read every synthesized template: cdk-nag (at synth, `Validations.of(scope).acknowledge`) and checkov
(in `make test`, reading each resource's `Metadata.checkov.skip`). A finding is fixed where it can be; where it
cannot, it is acknowledged here on the resource it names, never globally.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, CfnResource, Stack, Validations
from constructs import IConstruct


def acknowledge_nag(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """cdk-nag: acknowledge each rule (`AwsSolutions-IAM4[...]`) on `scope` and its children, with its reason."""
    # One call for all of them (the same acknowledgments, in order): each jsii call is a round trip to the kernel.
    if reasons:
        Validations.of(scope).acknowledge(
            *(Acknowledgment(id=rule_id, reason=reason) for rule_id, reason in reasons.items())
        )


def nag_id(stack: Stack, value: object) -> str:
    """How cdk-nag writes a resource in a granular finding id (`<Logical.Arn>/x/*`, `arn:<AWS::Partition>:...`).

    `value` is a token-bearing string or an already resolved CloudFormation value (`{"Ref": ...}`, `Fn::Join`).
    """
    return _render(stack.resolve(value))


def _cfn(resource: IConstruct) -> CfnResource:
    cfn = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not isinstance(cfn, CfnResource):
        raise TypeError(f"{resource.node.path} is not a CloudFormation resource and has none as default child")
    return cfn


def _add_skips(resource: IConstruct, tool: str, reasons: Mapping[str, str], reason_key: str) -> None:
    """Append `{"id", <reason_key>}` entries to `Metadata.<tool>.skip` in the caller's order (a kept first reason)."""
    cfn = _cfn(resource)
    for check_id, reason in reasons.items():
        if not reason.strip():
            raise ValueError(f"skipping {check_id} on {resource.node.path} needs a reason")
    current = cfn.get_metadata(tool)
    skips = list(current["skip"]) if isinstance(current, dict) else []
    known = {entry["id"] for entry in skips}
    skips += [{"id": check_id, reason_key: reason} for check_id, reason in reasons.items() if check_id not in known]
    cfn.add_metadata(tool, {"skip": skips})


def skip_checkov(resource: IConstruct, reasons: Mapping[str, str]) -> None:
    """checkov: skip each check (`CKV_AWS_117`) on this one CloudFormation resource, with its reason.

    `resource` is an L1 (`CfnResource`) or a construct whose default child is one. The skips land in the resource's
    `Metadata.checkov.skip` (checkov's CloudFormation suppression format) in the caller's order, after any already
    there; a check already skipped keeps its first reason. The order is the template's, so a caller keeps it stable.
    """
    _add_skips(resource, "checkov", reasons, "comment")


def skip_iam_lint(resource: IConstruct, reasons: Mapping[str, str]) -> None:
    """IAM policy lint (parliament, in `make test`): skip each finding on the resource that holds the policy
    document (a role, policy, key, bucket policy), with its reason. A finding id is `<ISSUE> <action or detail>`
    as the lint prints it (`RESOURCE_MISMATCH ec2:DetachNetworkInterface`); the skips land in
    `Metadata.parliament.skip`."""
    _add_skips(resource, "parliament", reasons, "reason")


def skip_guard(resource: IConstruct, reasons: Mapping[str, str]) -> None:
    """AWS Guard rules (cfn-guard, in `make test`): skip each rule (its Control Tower control ID, `CT.S3.PR.9`) on
    this one resource, with its reason, in `Metadata.guard.skip`. The bundled rules have no suppression of their
    own: the test drops a rule's finding on a resource that skips it, and fails on a skip without a reason."""
    _add_skips(resource, "guard", reasons, "reason")


NO_VPC_CONTROL = "CT.LAMBDA.PR.3"
"""Control Tower: a Lambda function in a VPC. Functions that reach only AWS APIs stay outside: in the VPC each
service would need an interface endpoint or the NAT, for no data path of their own."""


def skip_guard_on_functions_outside_vpc(scope: IConstruct, reason: str) -> None:
    """`skip_guard` of the VPC control on every function under `scope` that has no VPC configuration."""
    from aws_cdk import aws_lambda as lambda_

    for child in [scope, *scope.node.find_all()]:
        if isinstance(child, lambda_.CfnFunction) and child.vpc_config is None:
            skip_guard(child, {NO_VPC_CONTROL: reason})


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            return str(arg[0]).join(_render(part) for part in arg[1])
    raise ValueError(f"cannot render {value!r} as a cdk-nag finding id")
