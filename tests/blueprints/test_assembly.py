"""`mlstack.assembly.read_stacks`: each blueprint's stacks as the cloud assembly's manifest describes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlstack.assembly import read_stacks
from tests.synth import Session


def test_each_stack_is_read_from_the_nested_manifest(tmp_path: Path) -> None:
    artifacts = {
        "bpNetworkStackAB12.assets": {"type": "cdk:asset-manifest", "properties": {"file": "x.assets.json"}},
        "bpNetworkStackAB12": {
            "type": "aws:cloudformation:stack",
            "environment": "aws://123456789012/eu-west-1",
            "displayName": "bp/NetworkStack",
            "properties": {
                "templateFile": "n.template.json",
                "stackName": "bp-NetworkStack",
                "terminationProtection": True,
            },
            "dependencies": ["bpNetworkStackAB12.assets"],
        },
        "bpTrainingClusterStackCD34": {
            "type": "aws:cloudformation:stack",
            "environment": "aws://unknown-account/eu-west-1",
            "displayName": "bp/TrainingClusterStack",
            "properties": {"templateFile": "t.template.json", "stackName": "bp-TrainingClusterStack"},
            "dependencies": ["bpNetworkStackAB12", "bpTrainingClusterStackCD34.assets"],
        },
    }
    (tmp_path / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": artifacts}))
    stacks = read_stacks(tmp_path)
    assert list(stacks) == ["NetworkStack", "TrainingClusterStack"]
    network, training = stacks["NetworkStack"], stacks["TrainingClusterStack"]
    assert (network.account, network.region, network.termination_protection) == ("123456789012", "eu-west-1", True)
    assert network.depends_on == () and network.template_file == tmp_path / "n.template.json"
    assert training.depends_on == ("NetworkStack",)  # asset manifests are not stacks
    assert (training.account, training.termination_protection) == ("unknown-account", False)
    assert training.artifact_id == "bpTrainingClusterStackCD34" and training.stack_name == "bp-TrainingClusterStack"


def test_the_session_reads_the_same_stacks_the_constructs_define(
    session_and_constructs: tuple[Session, dict[str, dict[str, dict[str, Any]]]],
) -> None:
    # The stack constructs' own view, recorded by the process that synthesized (tests/session_synth.py).
    session, constructs = session_and_constructs
    for name, bp in session.blueprints.items():
        built = constructs[name]
        assert set(bp.stacks) == set(built), name
        for sid, stack in bp.stacks.items():
            assert stack.stack_name == built[sid]["stack_name"] and stack.artifact_id == built[sid]["artifact_id"]
            assert stack.termination_protection is built[sid]["termination_protection"], (name, sid)
            assert sorted(stack.depends_on) == built[sid]["depends_on"], (name, sid)
            assert json.loads(stack.template_file.read_text()) == bp.templates[sid]


def test_no_element_carries_a_creation_stack_trace(session: Session) -> None:
    # cdk.json sets aws:cdk:disable-creation-stack-traces (README, "Deploy"): from a Python app outside debug mode
    # the trace holds no Python frame, and capturing one per CloudFormation element cost about 2% of the synth.
    traced = []
    for name in session.blueprints:
        for path in sorted((session.outdir / f"assembly-{name}").glob("*.metadata.json")):
            for construct_path, entries in json.loads(path.read_text()).items():
                traced += [construct_path for entry in entries if entry["type"] == "aws:cdk:creationStack"]
    assert traced == []
