"""The training stack of one engine does not import the other engines' constructs."""

from __future__ import annotations

import subprocess
import sys


def test_an_eks_training_stack_imports_no_other_engines_constructs() -> None:
    # `cdk synth` of an EKS blueprint pays for the CDK modules it imports (aws_batch and aws_sagemaker are about
    # 0.15 s of its start): the operations module names the Batch and HyperPod constructs for typing only.
    code = (
        "import sys, mlstack.stacks.training; "
        "loaded = [m for m in ('aws_cdk.aws_batch', 'aws_cdk.aws_sagemaker', 'mlstack.constructs.training.batch', "
        "'mlstack.constructs.training.hyperpod') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
