"""The test processes' own jsii kernel starts with CDK_VALIDATION=false, so that CDK does not validate the templates
of the construct tests' own apps (`Template.from_stack`, `app.synth()`) with its built-in plugin.

That plugin's engine costs each test process about 2.7 s of CPU to start (with CDK's Rego rules, in every process
that synthesizes an app: measured, an app with one bucket synthesized by `Template.from_stack` 2.45 s -> 0.58 s wall,
3.3 s -> 0.6 s CPU), and on those apps it could only warn: CDK reports its findings as warnings unless the app sets
`@aws-cdk/core:validateAgainstDefaultRules`, which the test apps do not. The shipped blueprints are validated where
it counts: the session synth (`tests/session_synth.py`, its own process) runs mlstack's template validation on every
template and `tests/blueprints/test_gates.py` holds it to zero findings; a plugin a test registers itself
(`mlstack.validation.add_template_validation`) still runs, since CDK_VALIDATION only turns off the built-in one.

The variable is set for the kernel's start only: this process's environment, which the session synth, `cdk synth`
and the own-app subprocesses inherit, is left as it was.
"""

from __future__ import annotations

import os
import sys


def start_kernel() -> None:
    """Import aws_cdk (starting this process's kernel) with CDK_VALIDATION=false in the kernel's environment."""
    if "aws_cdk" in sys.modules:  # started already: nothing to set
        return
    import mlstack  # noqa: F401  (first: the kernel gets mlstack.kernel's options)

    previous = os.environ.get("CDK_VALIDATION")
    os.environ["CDK_VALIDATION"] = "false"
    try:
        import aws_cdk  # noqa: F401  (starts the kernel, which keeps its own copy of the environment)
    finally:
        if previous is None:
            del os.environ["CDK_VALIDATION"]
        else:
            os.environ["CDK_VALIDATION"] = previous
