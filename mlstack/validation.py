"""CDK's built-in template validation, as the apps mlstack builds run it: no CDK Rego rules, and the engine in
a worker process beside the jsii kernel.

aws-cdk-lib validates every template at synth with `@aws/cloudformation-validate` (the resource schemas and the
engine's built-in rules) and, by default, the CDK's own Rego rules ("CDK default rules" in aws-cdk-lib's README,
`Validations`). In aws-cdk-lib 2.275.0 those are one file, `gamelift-fleet.rego`: GameLift fleet, alias and build
invariants. mlstack deploys no GameLift resource, and compiling that file is most of the engine's start (about
1.0 s of 1.5 s with node --liftoff-only). A CDK upgrade that ships more default rules fails
`tests/blueprints/test_validation.py`, which lists them from the installed aws-cdk-lib.

The apps made by `app.py` and `mlstack.synth_all` turn CDK's built-in registration off
(`builtin_cloud_formation_validation=False`) and register `WorkerTemplateValidation`: the same engine, made from
the same package of the installed aws-cdk-lib and called with the same options (`mlstack.validation_workers`), whose
report it turns into violations exactly as CDK's `CloudFormationValidatePlugin.validate` does, under the same
plugin name (so CDK reports its errors as warnings unless the app sets the feature flag, as for its own), and with
the same version and rule IDs (CDK writes them into CDKMetadata's analytics). The worker starts before the
blueprints are built, so its engine's start overlaps the build: in the kernel, the engine's start and the
validation were about 3 s of an all-blueprint synth's node time that overlapped nothing. And it validates each
template as soon as the synth has written it (`add_template_validation`'s `stacks`): CDK calls its plugins only once
every stage has been written and cdk-nag has run, so validating then followed the rest of the synth (about 1.5 s of
an all-blueprint synth's 11 s, the second core idle meanwhile); CDK's call is answered from those results for
each template whose bytes are still the ones validated (validate_worker.cjs).
`tests/blueprints/test_validation.py` holds the two plugins' reports equal. Where the worker cannot start (no
`node` on PATH, no private writable cache, an engine that does not load) CDK's own plugin is registered instead;
where it dies during a synth, CDK's plugin validates those templates in the kernel.

`cdk synth --no-validation` (the CLI sets CDK_VALIDATION=false) skips it, as it skips CDK's own registration.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import aws_cdk as cdk
import jsii

from mlstack.validation_workers import ValidationWorker, WorkerGoneError, start_worker

PLUGIN_NAME = "CloudFormation Validate"
"""CDK's CloudFormationValidatePlugin.PLUGIN_NAME: CDK's synth treats reports of this name as the built-in one's."""

_SEVERITY = {"FATAL": "error", "ERROR": "error", "WARN": "warning", "INFO": "informational", "DEBUG": "debug"}
"""The engine's severity -> the report's (CDK's mapSeverity; anything else is a warning)."""

_PROPERTIES = re.compile(r"^Properties\.")

_UNKNOWN_ACCOUNT, _UNKNOWN_REGION = "unknown-account", "unknown-region"
"""A stack's `environment` (aws://ACCOUNT/REGION) names these where it has none; CDK passes the plugin None then
(cx-api's UNKNOWN_ACCOUNT and UNKNOWN_REGION)."""

_PLUGIN: cdk.CloudFormationValidatePlugin | None = None


def template_validation() -> cdk.CloudFormationValidatePlugin:
    """CDK's plugin without the Rego rules, one per process: its engine starts once (0.55 s, in the kernel) and
    serves every App, as CDK's own singleton does for the apps it registers it on."""
    global _PLUGIN
    if _PLUGIN is None:
        _PLUGIN = cdk.CloudFormationValidatePlugin(include_default_rules=False)
    return _PLUGIN


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """False where the CLI asked for no validation (`cdk synth --no-validation`)."""
    return environ.get("CDK_VALIDATION") != "false"


def start_template_validation(environ: Mapping[str, str] = os.environ) -> ValidationWorker | None:
    """Start the validation worker now (it gets ready while the caller builds); None when validation is off. Call
    before building, and pass the worker to `add_template_validation`."""
    return start_worker(environ) if enabled(environ) else None


def add_template_validation(
    app: cdk.App,
    environ: Mapping[str, str] = os.environ,
    worker: ValidationWorker | None = None,
    stacks: Iterable[cdk.Stack] = (),
) -> bool:
    """Register the template validation on `app` (the root: CDK refuses a validate plugin on a nested Stage):
    `WorkerTemplateValidation` over `worker` when it started, CDK's plugin (`template_validation()`) otherwise.
    With a worker, `app` must have been made with `builtin_cloud_formation_validation=False`, or CDK runs its own
    instance as well. Returns False, registering nothing, where CDK's would not run either.

    Call it once the app is built, just before `app.synth()`: the worker then validates the templates of `stacks`
    (the app's stacks; any left out are validated when CDK asks) as the synth writes them (`expected_templates`)."""
    if not enabled(environ):
        return False
    plugin: cdk.IPolicyValidationPlugin = (
        WorkerTemplateValidation(worker) if worker is not None and worker.ready() else template_validation()
    )
    cdk.Validations.of(app).add_plugins(plugin)
    if isinstance(plugin, WorkerTemplateValidation):
        plugin.worker.expect(expected_templates(stacks))
    return True


def expected_templates(stacks: Iterable[cdk.Stack]) -> list[dict[str, Any]]:
    """What CDK will pass the plugin for each stack (its PolicyValidationStack), known before the synth: the
    template's path in its stage's assembly folder, and the account and region of the stack's environment, None
    where unknown (an environment-agnostic stack)."""
    found: list[dict[str, Any]] = []
    for stack in stacks:
        stage = cdk.Stage.of(stack)
        assert stage is not None  # a Stack always has a Stage above it: the App at least
        account, region = stack.environment.removeprefix("aws://").split("/", 1)
        # The string CDK makes with Node's path.join (templateFullPath): normpath collapses '.' and '..' as it
        # does, which Path does not.
        template_path = os.path.normpath(os.path.join(stage.outdir, stack.template_file))  # noqa: PTH118
        found.append(
            {
                "templatePath": template_path,
                "accountId": None if account == _UNKNOWN_ACCOUNT else account,
                "region": None if region == _UNKNOWN_REGION else region,
            }
        )
    return found


@jsii.implements(cdk.IPolicyValidationPlugin)
class WorkerTemplateValidation:
    """CDK's CloudFormationValidatePlugin, with the engine in `worker` (see the module's docstring)."""

    def __init__(self, worker: ValidationWorker) -> None:
        self.worker = worker

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    @property
    def version(self) -> str:
        return self.worker.version

    @property
    def rule_ids(self) -> list[str]:
        # CDK writes the name, version and rule IDs of each registered plugin into CDKMetadata's analytics
        # (`cdk synth` with version reporting on): the same as its own plugin's, or every stack would change.
        return self.worker.rule_ids

    def validate(self, context: cdk.IPolicyValidationContext) -> cdk.PolicyValidationPluginReport:
        # Each property read is a round trip to the kernel: each is read once.
        stacks: list[dict[str, Any]] = []
        paths: list[str] = []
        for stack in context.stack_templates:
            stacks.append({"templatePath": stack.template_path, "accountId": stack.account_id, "region": stack.region})
            paths.append(stack.stack_construct_path)
        try:
            diagnostics = self.worker.validate(stacks)
        except WorkerGoneError as gone:
            # The templates still get validated: by CDK's plugin, in the kernel (its engine starts now).
            print(f"warning: {gone}; validating in the CDK kernel instead", file=sys.stderr)
            return template_validation().validate(context)
        violations = report_violations(stacks, paths, diagnostics)
        return cdk.PolicyValidationPluginReport(
            success=all(v["severity"] not in ("error", "fatal") for v in violations),
            violations=[_violation(v) for v in violations],
        )


def report_violations(
    stacks: list[dict[str, Any]], construct_paths: list[str], diagnostics: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The engine's diagnostics of each stack's template as CDK's plugin turns them into violations: one per rule,
    severity and description, in the order first seen, each listing every resource (or, for a finding on no
    resource, the stack) it was found on."""
    violations: list[dict[str, Any]] = []
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for stack, construct_path, findings in zip(stacks, construct_paths, diagnostics, strict=True):
        for d in findings:
            severity = _SEVERITY.get(d["severity"], "warning")
            logical_id = d.get("logicalId")
            property_path = d.get("propertyPath")
            resource = {
                "resourceLogicalId": logical_id,
                "constructPath": None if logical_id else construct_path,
                "templatePath": stack["templatePath"],
                "locations": [property_path] if property_path else [],
            }
            prefix = f"{_PROPERTIES.sub('', property_path)}: " if property_path else ""
            description = f"{prefix}{d['message']}"
            key = (d["ruleId"], severity, description)
            if key in found:
                found[key]["violatingResources"].append(resource)
                continue
            violation = {
                "ruleName": d["ruleId"],
                "description": description,
                "severity": severity,
                "fix": d.get("suggestedFix"),
                "violatingResources": [resource],
                "ruleMetadata": {"category": d["category"]} if d.get("category") else None,
            }
            found[key] = violation
            violations.append(violation)
    return violations


def _violation(v: dict[str, Any]) -> cdk.PolicyViolation:
    return cdk.PolicyViolation(
        rule_name=v["ruleName"],
        description=v["description"],
        severity=v["severity"],
        fix=v["fix"],
        rule_metadata=v["ruleMetadata"],
        violating_resources=[
            cdk.PolicyViolatingResource(
                locations=r["locations"],
                resource_logical_id=r["resourceLogicalId"],
                construct_path=r["constructPath"],
                template_path=r["templatePath"],
            )
            for r in v["violatingResources"]
        ],
    )
