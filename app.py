#!/usr/bin/env python3
"""CDK entry point, and the only reader of CDK context.

`npx cdk synth` builds the default blueprint; `-c blueprint=<name>` picks `blueprints/<name>.yaml` and
`-c blueprint=<path>` any file. A bad blueprint prints one line per problem and exits 1, no traceback.
`-c training-image=<uri>`: the training job runs that image instead of one `cdk deploy` builds with Docker.
"""

from __future__ import annotations

import mlstack  # noqa: F401  (first: the jsii kernel that `import aws_cdk` starts gets mlstack.kernel's options)

# isort: split
import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from mlstack import blueprint, config
from mlstack.console import print_problems
from mlstack.errors import MlstackError
from mlstack.k8s.image import IMAGE_CONTEXT_KEY, with_job_image
from mlstack.synth_all import exit_after_synth, fewer_gc_passes
from mlstack.validation import add_template_validation, start_template_validation


def main() -> int:
    app = cdk.App(builtin_cloud_formation_validation=False)  # registered below, with the worker
    ref = app.node.try_get_context("blueprint") or config.DEFAULT_BLUEPRINT
    try:
        loaded = config.load(str(ref))
    except MlstackError as err:
        print_problems(err)
        return 1
    # CDK's template validation runs in a worker that starts now, ready when synth needs it (mlstack/validation.py).
    validation = start_template_validation()
    image = app.node.try_get_context(IMAGE_CONTEXT_KEY)
    if image:
        loaded = with_job_image(loaded, str(image))
    with fewer_gc_passes():
        built = blueprint.build(app, loaded)
        if app.node.try_get_context("nag") not in (False, "false"):
            # cdk-nag 3 is a validation plugin: unacknowledged AwsSolutions findings fail the synth.
            cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        add_template_validation(app, worker=validation, stacks=built.stacks)
        app.synth()
    return 0


if __name__ == "__main__":
    exit_after_synth(main())
