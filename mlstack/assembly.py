"""What `mlstack.synth_all` reads back from the cloud assembly it wrote: each blueprint's stacks as the CDK CLI
sees them (`manifest.json` of `assembly-<blueprint>/`), how many processes it splits over, and the merge of
assemblies written by several processes into one, file for file the assembly one process writes (no CDK import:
plain JSON and files)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPORT = "validation-report.json"


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


def default_jobs() -> int:
    """Processes for `synth_all`'s command line: one per CPU this process may run on, at most 4. A synth keeps
    about one CPU busy (Python and its jsii kernel take turns), so a second process on a second CPU halves the
    wall time; each process pays its own kernel start (about 3 s CPU), so more than 4 gains little."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


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


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")


def merge_reports(reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One validation report of several apps' (CDK's `validation-report.json`): each plugin's violations and
    acknowledged ones concatenated in order, its conclusion `failure` if any app's was."""
    merged: dict[str, Any] = {}
    plugins: dict[str, dict[str, Any]] = {}
    for report in reports:
        if not report:
            continue
        merged.setdefault("version", report.get("version"))
        merged.setdefault("title", report.get("title"))
        for plugin in report.get("pluginReports", []):
            into = plugins.get(plugin["pluginName"])
            if into is None:
                plugins[plugin["pluginName"]] = json.loads(json.dumps(plugin))
                continue
            for key in ("violations", "suppressedViolations"):
                into.setdefault(key, []).extend(plugin.get(key, []))
            if plugin.get("conclusion") == "failure":
                into["conclusion"] = "failure"
    if merged:
        merged["pluginReports"] = list(plugins.values())
    return merged


def merge_part(outdir: Path, part: Path, order: list[str]) -> None:
    """Move the nested assemblies and assets that another process synthesized into `part` (an App's outdir) into
    `outdir`, and list them in `outdir`'s manifest and tree as one App would: assemblies in `order` (directory
    names), the rest after. Assets are named by their content hash, so one already present is the same file."""
    for entry in sorted(part.iterdir()):
        if entry.name.startswith("assembly-") or entry.name.startswith("asset."):
            target = outdir / entry.name
            if target.exists():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            else:
                entry.rename(target)
    manifest, extra = _read(outdir / "manifest.json"), _read(part / "manifest.json")
    artifacts = {**manifest["artifacts"], **extra["artifacts"]}
    rank = {name: i for i, name in enumerate(order)}
    manifest["artifacts"] = dict(sorted(artifacts.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    _write(outdir / "manifest.json", manifest)
    tree, extra_tree = _read(outdir / "tree.json"), _read(part / "tree.json")
    children = {**tree["tree"].get("children", {}), **extra_tree["tree"].get("children", {})}
    names = {name.removeprefix("assembly-"): i for name, i in rank.items()}
    tree["tree"]["children"] = dict(sorted(children.items(), key=lambda kv: names.get(kv[0], len(names))))
    _write(outdir / "tree.json", tree)
    reports = [_read(p) if p.exists() else {} for p in (outdir / REPORT, part / REPORT)]
    merged = merge_reports(reports)
    if merged:
        _write(outdir / REPORT, merged)
    shutil.rmtree(part)
