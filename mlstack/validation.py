"""CDK's built-in template validation, registered on the apps mlstack builds with one change: no CDK Rego rules.

aws-cdk-lib validates every template at synth with `@aws/cloudformation-validate` (the resource schemas and the
engine's built-in rules) and, by default, the CDK's own Rego rules ("CDK default rules" in aws-cdk-lib's README,
`Validations`). In aws-cdk-lib 2.275.0 those are one file, `gamelift-fleet.rego`: GameLift fleet, alias and build
invariants. mlstack deploys no GameLift resource, and compiling that file is most of the engine's start: about
1.0 s of a synth's 1.5 s engine start, paid in every process that synthesizes (measured with node --liftoff-only,
as the kernel runs: 1.3-1.6 s with the rule, 0.55-0.61 s without). The schema validation and the engine's 308
built-in rules run as before; findings are still reported under the plugin's own name ("CloudFormation Validate").

A CDK upgrade that ships more default rules fails `tests/blueprints/test_validation.py`, which lists them from the
installed aws-cdk-lib, so whoever upgrades decides whether mlstack's templates need them.

`cdk synth --no-validation` (the CLI sets CDK_VALIDATION=false) skips it, as it skips CDK's own registration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import aws_cdk as cdk

_PLUGIN: cdk.CloudFormationValidatePlugin | None = None


def template_validation() -> cdk.CloudFormationValidatePlugin:
    """The process's one plugin: its engine starts once (0.55 s) and serves every App, as CDK's own singleton does
    for the apps it registers it on."""
    global _PLUGIN
    if _PLUGIN is None:
        _PLUGIN = cdk.CloudFormationValidatePlugin(include_default_rules=False)
    return _PLUGIN


def add_template_validation(app: cdk.App, environ: Mapping[str, str] = os.environ) -> bool:
    """Register `template_validation()` on `app` (the root: CDK refuses the plugin on a nested Stage), in place of
    the instance CDK would register. Returns False, registering nothing, where CDK's would not run either."""
    if environ.get("CDK_VALIDATION") == "false":
        return False
    cdk.Validations.of(app).add_plugins(template_validation())
    return True
