"""What `mlstack.synth_all` reads back from the cloud assembly it wrote: each blueprint's stacks as the CDK CLI
sees them (`manifest.json` of `assembly-<blueprint>/`), so that tests and tools need no stack constructs for
names, regions, dependencies or template paths (no CDK import: plain JSON)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StackInfo:
    """One stack of a synthesized blueprint, from its artifact in the nested assembly's manifest."""

    construct_id: str
    """The stack's construct ID in the blueprint (`NetworkStack`, `TrainingClusterStack`, ...)."""
    artifact_id: str
    stack_name: str
    account: str
    """`unknown-account` when the blueprint names none (environment-agnostic in account)."""
    region: str
    termination_protection: bool
    depends_on: tuple[str, ...]
    """Construct IDs of the blueprint's stacks this one deploys after."""
    template_file: Path


def read_stacks(assembly_dir: Path) -> dict[str, StackInfo]:
    """Construct ID -> `StackInfo` for every stack artifact of a nested assembly, in the manifest's order."""
    artifacts: dict[str, Any] = json.loads((assembly_dir / "manifest.json").read_text(encoding="utf-8"))["artifacts"]
    stacks = {k: a for k, a in artifacts.items() if a["type"] == "aws:cloudformation:stack"}
    by_artifact = {k: a["displayName"].rsplit("/", 1)[-1] for k, a in stacks.items()}
    result: dict[str, StackInfo] = {}
    for artifact_id, artifact in stacks.items():
        account, region = artifact["environment"].removeprefix("aws://").split("/", 1)
        props = artifact["properties"]
        result[by_artifact[artifact_id]] = StackInfo(
            construct_id=by_artifact[artifact_id],
            artifact_id=artifact_id,
            stack_name=props["stackName"],
            account=account,
            region=region,
            termination_protection=bool(props.get("terminationProtection", False)),
            depends_on=tuple(by_artifact[d] for d in artifact.get("dependencies", ()) if d in by_artifact),
            template_file=assembly_dir / props["templateFile"],
        )
    return result
