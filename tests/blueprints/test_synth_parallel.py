"""`synthesize_all(jobs > 1)`: the blueprints split over processes, one merged assembly, the same templates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlstack import synth_all
from mlstack.assembly import default_jobs, merge_reports
from mlstack.config import BLUEPRINTS_DIR, load
from tests.synth import TEST_CONTEXT, Session


def _worker_made(session: Session) -> list[str]:
    return [name for name, bp in session.blueprints.items() if bp.built is None]


def test_the_session_is_split_and_merged_into_one_assembly(session: Session) -> None:
    if default_jobs() < 2 or len(session.blueprints) < 2:
        pytest.skip("one CPU (or one blueprint): the session synthesizes in one process")
    assert _worker_made(session), "no blueprint came from a worker"
    assert any(bp.built is not None for bp in session.blueprints.values())
    manifest = json.loads((session.outdir / "manifest.json").read_text())
    nested = [k for k, a in manifest["artifacts"].items() if a["type"] == "cdk:cloud-assembly"]
    assert nested == [f"assembly-{name}" for name in session.blueprints]  # each once, in file order
    tree = json.loads((session.outdir / "tree.json").read_text())["tree"]["children"]
    assert set(session.blueprints) <= set(tree)
    assert not list(session.outdir.glob(".part-*")), "a worker's part folder was left behind"
    for bp in session.blueprints.values():
        for stack in bp.stacks.values():
            assert stack.template_file.is_file(), stack
            assert stack.construct_id in bp.templates


def test_a_blueprint_a_worker_made_is_byte_identical_in_process(
    session: Session, tmp_path_factory: pytest.TempPathFactory
) -> None:
    made = _worker_made(session)
    if not made:
        pytest.skip("one process synthesized the session")
    # The smallest of them: each blueprint is its own Stage, so one is enough to compare the two paths.
    name = min(made, key=lambda n: sum(len(json.dumps(t)) for t in session.blueprints[n].templates.values()))
    again = synth_all.synthesize_all(
        tmp_path_factory.mktemp("in-process"), [BLUEPRINTS_DIR / f"{name}.yaml"], extra_context=TEST_CONTEXT, nag=False
    )
    assert again.blueprints[name].built is not None
    for sid, stack in session.blueprints[name].stacks.items():
        assert stack.template_file.read_bytes() == again.blueprints[name].stacks[sid].template_file.read_bytes(), sid


def test_a_failed_worker_fails_the_synth_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(part: Path, files: list[Path], context: dict[str, Any], nag: bool) -> subprocess.Popen[bytes]:
        part.mkdir(parents=True)
        with (part / synth_all.WORKER_LOG).open("wb") as log:
            code = "import sys; print('worker boom', file=sys.stderr); sys.exit(3)"
            return subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)

    monkeypatch.setattr(synth_all, "_start_worker", failing)
    files = [BLUEPRINTS_DIR / "inference-serverless.yaml", BLUEPRINTS_DIR / "inference-graviton.yaml"]
    with pytest.raises(RuntimeError, match=r"(?s)exited 3.*worker boom"):
        synth_all.synthesize_all(tmp_path / "out", files, extra_context=TEST_CONTEXT, nag=False, jobs=2)


def test_validation_reports_of_two_apps_merge_per_plugin() -> None:
    def report(conclusion: str, violations: list[str], suppressed: list[str]) -> dict[str, Any]:
        plugin = {
            "pluginName": "CloudFormation Validate",
            "conclusion": conclusion,
            "violations": violations,
            "suppressedViolations": suppressed,
        }
        return {"version": "55.0.0", "title": "Validation Report", "pluginReports": [plugin]}

    merged = merge_reports([report("success", [], ["a"]), {}, report("failure", ["v"], ["b"])])
    (plugin,) = merged["pluginReports"]
    assert plugin["conclusion"] == "failure"
    assert plugin["violations"] == ["v"]
    assert plugin["suppressedViolations"] == ["a", "b"]
    assert merge_reports([{}, {}]) == {}


def test_blueprints_split_by_weight_with_the_first_group_in_process() -> None:
    configs = [(BLUEPRINTS_DIR / f"{n}.yaml", load(BLUEPRINTS_DIR / f"{n}.yaml")) for n in _some()]
    groups = synth_all._groups(configs, 2)
    assert len(groups) == 2 and sorted(p for g in groups for p in g) == sorted(p for p, _ in configs)
    assert synth_all._groups(configs, 1) == [[p for p, _ in sorted(configs, key=lambda pc: -synth_all._weight(pc[1]))]]
    assert len(synth_all._groups(configs[:1], 4)) == 1  # never more processes than blueprints


def _some() -> list[str]:
    return ["eks-gpu-training", "inference-serverless", "mlops-pipeline", "document-ai"]
