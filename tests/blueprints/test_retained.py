"""A failed first create leaves nothing behind: no template keeps a resource with `DeletionPolicy: Retain`.

`Retain` keeps a resource even when the stack operation that created it rolls back: a bucket, repository or log
group with a fixed name then makes the retry fail (the name already exists), and a file system keeps billing.
`RetainExceptOnCreate` (CDK `RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE`, `mlstack.constructs.removal.RETAINED`)
keeps it on every later delete and replacement and is accepted by every resource type that takes a DeletionPolicy
("DeletionPolicy attribute", AWS CloudFormation Template Reference), so nothing needs plain `Retain`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from mlstack import blueprint
from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig
from mlstack.synth_all import cdk_json_context
from tests.blueprints.test_stateful import STATEFUL_TYPES
from tests.synth import TEST_CONTEXT, Session

ALLOWED_RETAIN: dict[str, str] = {}
"""Resource type -> why plain `Retain` is needed there. Empty: RetainExceptOnCreate works for every type."""

NAME_PROPERTIES = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SageMaker::ModelPackageGroup": "ModelPackageGroupName",
    "AWS::SageMaker::Domain": "DomainName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::EC2::SecurityGroup": "GroupName",
}
"""The property that fixes a type's physical name: with plain `Retain`, a rolled-back create blocks its retry."""

DESTROY_SAMPLE = (
    "batch-training",
    "document-ai",
    "eks-gpu-training",
    "eks-llm-serving",
    "hyperpod-slurm-training",
    "inference-intel-amx",
    "mlops-pipeline",
)
"""Blueprints that together hold every stateful type and every engine's retained resources (checked below)."""


def _retained(templates: dict[str, dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (stack_id, logical_id, resource)
        for stack_id, template in templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource.get("DeletionPolicy", "Delete") != "Delete"
        or resource.get("UpdateReplacePolicy", "Delete") != "Delete"
    ]


def test_no_template_retains_a_resource_whose_own_create_rolled_back(session: Session) -> None:
    fixed_names, others = [], []
    for name, bp in session.blueprints.items():
        for stack_id, logical_id, resource in _retained(bp.templates):
            kind = resource["Type"]
            if resource.get("DeletionPolicy") != "Retain" or kind in ALLOWED_RETAIN:
                continue
            name_property = NAME_PROPERTIES.get(kind)
            physical = resource.get("Properties", {}).get(name_property) if name_property else None
            where = f"{name}/{stack_id}/{logical_id} ({kind})"
            if physical is not None:
                fixed_names.append(f"{where}: {name_property} {physical!r} is fixed, so a retry would find it taken")
            else:
                others.append(f"{where}: would outlive a rolled-back first create")
    problems = fixed_names + others  # fixed physical names first: they are the ones that block a retry
    assert problems == [], "DeletionPolicy Retain; use RETAINED (RetainExceptOnCreate):\n" + "\n".join(problems)


def test_retained_resources_are_retained_on_update_replacement_too(session: Session) -> None:
    # RetainExceptOnCreate only speaks about deletion; a replacement on update must keep the old resource too.
    bad = [
        f"{name}/{stack_id}/{logical_id}: UpdateReplacePolicy {resource.get('UpdateReplacePolicy')}"
        for name, bp in session.blueprints.items()
        for stack_id, logical_id, resource in _retained(bp.templates)
        if resource.get("DeletionPolicy") == "RetainExceptOnCreate" and resource.get("UpdateReplacePolicy") != "Retain"
    ]
    assert bad == []


def test_allowed_retains_say_why() -> None:
    assert all(len(reason) >= 20 for reason in ALLOWED_RETAIN.values())


def _destroy_variant(name: str) -> BlueprintConfig:
    raw = yaml.safe_load((BLUEPRINTS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return BlueprintConfig.model_validate({**raw, "name": name, "removal": "destroy"})


@pytest.fixture(scope="module")
def destroy_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, Any]]]:
    """`removal: destroy` versions of DESTROY_SAMPLE in one App (no cdk-nag: test_gates holds the shipped ones)."""
    outdir = tmp_path_factory.mktemp("destroy")
    app = cdk.App(outdir=str(outdir), context={**cdk_json_context(), **TEST_CONTEXT})
    built = {name: blueprint.build(cdk.Stage(app, name), _destroy_variant(name)) for name in DESTROY_SAMPLE}
    app.synth()
    return {
        name: {
            stack.node.id: json.loads(
                Path(outdir, f"assembly-{name}", f"{stack.artifact_id}.template.json").read_text()
            )
            for stack in item.stacks
        }
        for name, item in built.items()
    }


def test_a_destroy_sandbox_keeps_nothing(destroy_templates: dict[str, dict[str, dict[str, Any]]]) -> None:
    kept = [
        f"{name}/{stack_id}/{logical_id} ({resource['Type']}): {resource.get('DeletionPolicy')}"
        for name, templates in destroy_templates.items()
        for stack_id, logical_id, resource in _retained(templates)
    ]
    assert kept == []


def test_the_destroy_sample_covers_every_retained_type(
    session: Session, destroy_templates: dict[str, dict[str, dict[str, Any]]]
) -> None:
    """Every type the shipped blueprints retain (and every stateful type) appears in the destroy sample."""
    sampled = {
        r["Type"]
        for templates in destroy_templates.values()
        for t in templates.values()
        for r in t["Resources"].values()
    }
    retained = {r["Type"] for bp in session.blueprints.values() for _, _, r in _retained(bp.templates)}
    assert retained - sampled == set()
    assert {
        r["Type"] for bp in session.blueprints.values() for t in bp.templates.values() for r in t["Resources"].values()
    } & STATEFUL_TYPES <= sampled
