"""The real `cdk bootstrap` and `cdk deploy` of a small blueprint against a local moto server.

Create, update (one more tag), then a deploy with no change. It takes minutes (three synths), so it runs in
`make test-deploy-local` (called by CI next to `make test`), not in `make test`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlstack.local_deploy import _listening, free_port, local_deploy

pytestmark = pytest.mark.skipif(
    os.environ.get("MLSTACK_LOCAL_DEPLOY") != "1", reason="slow: runs in `make test-deploy-local`"
)

BLUEPRINT = "inference-serverless"  # the smallest: VPC without NAT, one serverless endpoint, one function


def test_create_update_and_no_change_deploy(tmp_path: Path) -> None:
    port = free_port()
    out = local_deploy(BLUEPRINT, port=port, workdir=tmp_path)
    assert not _listening(port), "the moto server outlived the deploy"

    assert "bootstrapped" in out["bootstrap"]
    create = out["report-create"]
    assert f"{BLUEPRINT}-NetworkStack: CREATE_COMPLETE" in create
    assert f"{BLUEPRINT}-DataStack: CREATE_COMPLETE" in create
    assert f"{BLUEPRINT}-InferenceStack: CREATE_COMPLETE" in create
    # A real output value: moto's S3 bucket holding the model artifact, which the DataStack owns (it deploys first);
    # the InferenceStack's own ModelArtifact output resolves to the same bucket across stacks.
    artifacts = {line.split(" = ", 1)[1] for line in create.splitlines() if "output ModelArtifact = " in line}
    assert len(artifacts) == 1, create
    assert artifacts.pop().startswith(f"s3://{BLUEPRINT}-datastack-modelbucket"), create
    assert "output SentimentEndpointName = " in create
    assert "not modelled by moto (placeholders, nothing behind them): " in create
    assert "AWS::Lambda::Url" in create and "Custom::VpcRestrictDefaultSG" in create

    update = out["report-update"]
    assert f"{BLUEPRINT}-NetworkStack: UPDATE_COMPLETE" in update
    assert f"{BLUEPRINT}-InferenceStack: UPDATE_COMPLETE" in update

    # Network, Data and Inference stacks: none changes.
    assert out["no-change"].count("(no changes)") == 3
