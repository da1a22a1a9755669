"""CDK's template validation as mlstack registers it (mlstack/validation.py): on, once per process, without the
CDK's Rego rules, which concern only resource types no blueprint uses."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import aws_cdk as cdk

from mlstack.validation import add_template_validation, template_validation
from tests.synth import Session

PLUGIN = "CloudFormation Validate"

RULES_LEFT_OUT = {"gamelift-fleet.rego": "AWS::GameLift::"}
"""The CDK default Rego rules of the installed aws-cdk-lib -> the resource types they check."""


def _default_rego_rules() -> set[str]:
    # aws-cdk-lib's JavaScript ships inside the Python package as the jsii tarball; the rules are files in it.
    spec = importlib.util.find_spec("aws_cdk._jsii")
    assert spec is not None and spec.origin is not None
    (tarball,) = Path(spec.origin).parent.glob("aws-cdk-lib@*.jsii.tgz")
    prefix = "package/core/lib/validation/rules/"
    with tarfile.open(tarball) as archive:
        return {Path(m.name).name for m in archive if m.name.startswith(prefix) and m.name.endswith(".rego")}


def test_the_left_out_default_rules_are_the_ones_cdk_ships() -> None:
    # A CDK upgrade that adds default rules fails here: decide whether mlstack's templates need them, then list
    # them (and the types they check) or include the defaults again in mlstack/validation.py.
    assert _default_rego_rules() == set(RULES_LEFT_OUT)


def test_no_blueprint_has_a_resource_the_left_out_rules_check(session: Session) -> None:
    found = [
        f"{name}/{stack_id}: {resource['Type']}"
        for name, bp in session.blueprints.items()
        for stack_id, template in bp.templates.items()
        for resource in template.get("Resources", {}).values()
        if resource["Type"].startswith(tuple(RULES_LEFT_OUT.values()))
    ]
    assert found == []


def test_the_session_synth_ran_the_template_validation(session: Session) -> None:
    # The clean-report gate (test_gates) would pass with no validation at all: the plugin's report must be there.
    names = [report["pluginName"] for report in session.validation_report.get("pluginReports", [])]
    assert names.count(PLUGIN) == 1


def _seeded_app(outdir: Path) -> cdk.App:
    app = cdk.App(outdir=str(outdir))
    cdk.CfnResource(cdk.Stack(app, "Seed"), "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1})
    return app


def test_a_schema_violation_is_reported_once_by_the_registered_plugin(tmp_path: Path) -> None:
    app = _seeded_app(tmp_path)
    assert add_template_validation(app, environ={})
    app.synth()
    reports = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]
    assert [r["pluginName"] for r in reports] == [PLUGIN]  # in place of CDK's instance, not beside it
    (violation,) = reports[0]["violations"]
    assert violation["ruleName"] == "F3002" and "NotAProperty" in violation["description"]
    assert violation["violatingConstructs"][0]["constructPath"] == "Seed/Bucket"


def test_cdk_validation_false_registers_nothing(tmp_path: Path) -> None:
    # `cdk synth --no-validation` sets CDK_VALIDATION=false in the app's environment; CDK then skips its own
    # instance too. (Only the registration is checked: the running kernel read its environment at its start.)
    assert not add_template_validation(_seeded_app(tmp_path), environ={"CDK_VALIDATION": "false"})


def test_one_plugin_serves_every_app() -> None:
    assert template_validation() is template_validation()
