"""Early template validation (mlstack/validate_worker.cjs, `ValidationWorker.expect`): the worker validates each
template as soon as the synth has written it, and CDK's call to the plugin gets those results only for templates
whose bytes are still the ones validated. What it must never do is answer for bytes it did not validate: a
template rewritten, or read while it was being written."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
import pytest

from mlstack.config.loader import BLUEPRINTS_DIR
from mlstack.validation import add_template_validation, expected_templates, start_template_validation
from mlstack.validation_workers import ValidationWorker


@pytest.fixture(scope="module")
def worker() -> ValidationWorker:
    started = start_template_validation()
    assert started is not None and started.ready(), started and started.start_error
    return started


def _bucket(prop: str) -> str:
    return json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {prop: 1}}}})


def _wait_early(worker: ValidationWorker, count: int) -> dict[str, int]:
    """The worker's stats once it has validated `count` templates early (it looks every 20 ms)."""
    for _ in range(1000):
        stats = worker.stats()
        if stats["early"] >= count:
            return stats
        time.sleep(0.01)
    raise AssertionError(f"not validated early: {worker.stats()}")


def _messages(diagnostics: list[dict[str, Any]]) -> str:
    return " ".join(d["message"] for d in diagnostics)


@jsii.implements(cdk.IPolicyValidationPlugin)
class _WaitForEarly:
    def __init__(self, worker: ValidationWorker, count: int) -> None:
        self.worker, self.count = worker, count

    name = "wait for early validation"
    version = "1"
    rule_ids: list[str] = []

    def validate(self, context: cdk.IPolicyValidationContext) -> cdk.PolicyValidationPluginReport:
        _wait_early(self.worker, self.count)
        return cdk.PolicyValidationPluginReport(success=True, violations=[])


def test_a_synth_is_answered_from_the_templates_validated_as_they_were_written(
    tmp_path: Path, worker: ValidationWorker
) -> None:
    # A stack of the App (no environment) and one of a nested Stage (pinned): both path forms, both environments.
    app = cdk.App(outdir=str(tmp_path), builtin_cloud_formation_validation=False)
    top = cdk.Stack(app, "Top")
    stage = cdk.Stage(app, "Nested")
    inner = cdk.Stack(stage, "Inner", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    for stack in (top, inner):
        cdk.CfnResource(stack, "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1})
    expected = expected_templates([top, inner])
    assert [(e["accountId"], e["region"]) for e in expected] == [(None, None), ("123456789012", "eu-west-1")]
    # In a real synth cdk-nag and the App's own synth run between the last template and this plugin; here a plugin
    # registered before it stands for them, and waits for the worker.
    cdk.Validations.of(app).add_plugins(_WaitForEarly(worker, 2))
    assert add_template_validation(app, environ={}, worker=worker, stacks=[top, inner])
    app.synth()  # the engine's findings are warnings here (no validateAgainstDefaultRules)
    assert worker.stats() == {"early": 2, "hits": 2, "misses": 0, "expecting": 0}
    # Two hits: what CDK passed the plugin (paths, accounts, regions) is what expected_templates said it would.
    report = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]
    (found,) = [v for r in report for v in r["violations"] if v["ruleName"] == "F3002"]
    assert {c["constructPath"] for c in found["violatingConstructs"]} == {"Top/Bucket", "Nested/Inner/Bucket"}


def test_a_template_rewritten_after_its_early_validation_is_validated_again(
    tmp_path: Path, worker: ValidationWorker
) -> None:
    template = tmp_path / "A.template.json"
    stack = {"templatePath": str(template), "accountId": None, "region": "us-east-1"}
    worker.expect([stack])
    template.write_text(_bucket("First"))
    _wait_early(worker, 1)
    template.write_text(_bucket("Second"))
    (diagnostics,) = worker.validate([stack])
    assert "'Second' was unexpected" in _messages(diagnostics) and "First" not in _messages(diagnostics)
    assert worker.stats() == {"early": 1, "hits": 0, "misses": 1, "expecting": 0}


def test_a_template_still_being_written_waits_until_it_is_whole(tmp_path: Path, worker: ValidationWorker) -> None:
    template = tmp_path / "A.template.json"
    stack = {"templatePath": str(template), "accountId": None, "region": None}
    whole = _bucket("Whole")
    worker.expect([stack])
    template.write_text(whole[: len(whole) // 2])  # what a reader sees halfway through the synth's write
    time.sleep(0.2)  # ten looks at the cut file: none validates it
    assert worker.stats()["early"] == 0
    template.write_text(whole)
    _wait_early(worker, 1)
    (diagnostics,) = worker.validate([stack])
    assert "'Whole' was unexpected" in _messages(diagnostics)
    assert worker.stats() == {"early": 1, "hits": 1, "misses": 0, "expecting": 0}


def test_a_result_is_for_its_environment_only(tmp_path: Path, worker: ValidationWorker) -> None:
    # The engine resolves the pseudo parameters per stack: an early result under another account or region is not
    # the answer.
    template = tmp_path / "A.template.json"
    worker.expect([{"templatePath": str(template), "accountId": None, "region": "us-east-1"}])
    template.write_text(_bucket("X"))
    _wait_early(worker, 1)
    worker.validate([{"templatePath": str(template), "accountId": None, "region": "eu-west-1"}])
    assert worker.stats() == {"early": 1, "hits": 0, "misses": 1, "expecting": 0}


def test_a_template_never_written_is_validated_when_asked_and_a_missing_one_fails(
    tmp_path: Path, worker: ValidationWorker
) -> None:
    later, never = tmp_path / "Later.template.json", tmp_path / "Never.template.json"
    stacks = [{"templatePath": str(path), "accountId": None, "region": None} for path in (later, never)]
    worker.expect(stacks)
    with pytest.raises(Exception, match=r"template validation failed: .*Never\.template\.json"):
        worker.validate(stacks[1:])
    later.write_text(_bucket("Late"))  # written after the request: no longer looked for, validated when asked
    time.sleep(0.1)  # five looks, had it still been looked for
    (diagnostics,) = worker.validate(stacks[:1])
    assert "'Late' was unexpected" in _messages(diagnostics)
    assert worker.stats()["early"] == 0


def test_a_worker_that_is_not_running_expects_nothing(tmp_path: Path) -> None:
    without = ValidationWorker(environ={"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    without.expect([{"templatePath": str(tmp_path / "A.template.json"), "accountId": None, "region": None}])
    assert without.stats() == {}


def test_a_template_left_by_an_earlier_synth_waits_for_its_rewrite(tmp_path: Path, worker: ValidationWorker) -> None:
    # The CDK CLI writes over an existing cdk.out: the file there when the synth starts is the last synth's.
    template = tmp_path / "A.template.json"
    template.write_text(_bucket("Stale"))
    stack = {"templatePath": str(template), "accountId": None, "region": None}
    worker.expect([stack])
    time.sleep(0.1)  # five looks at the old file: none validates it
    assert worker.stats() == {"early": 0, "hits": 0, "misses": 0, "expecting": 1}
    template.write_text(_bucket("Fresh"))
    _wait_early(worker, 1)
    (diagnostics,) = worker.validate([stack])
    assert "'Fresh' was unexpected" in _messages(diagnostics)
    assert worker.stats() == {"early": 1, "hits": 1, "misses": 0, "expecting": 0}


def test_a_worker_whose_caller_is_gone_exits_though_it_still_expects_templates(tmp_path: Path) -> None:
    # Python ended without closing it (SIGTERM, SIGKILL, os._exit): its stdin closes, and a poll still waiting for
    # templates must not keep it running.
    alone = ValidationWorker()
    assert alone.ready(), alone.start_error
    try:
        alone.expect([{"templatePath": str(tmp_path / "Never.template.json"), "accountId": None, "region": None}])
        assert alone.stats()["expecting"] == 1
        process = alone._started().popen
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        alone.close()


def test_a_synth_that_fails_leaves_the_worker_looking_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlstack import synth_all

    class SynthFailedError(Exception):
        pass

    def fail(self: cdk.App) -> None:
        raise SynthFailedError

    monkeypatch.setattr(cdk.App, "synth", fail)
    with pytest.raises(SynthFailedError):
        synth_all.synthesize_all(tmp_path, [BLUEPRINTS_DIR / "inference-serverless.yaml"], nag=False)
    used = start_template_validation()  # the process's worker, the one synthesize_all used
    assert used is not None
    stats = used.stats()
    assert stats["expecting"] == 0, stats
