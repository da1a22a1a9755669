"""CDK's template validation in worker processes (mlstack/validation.py, mlstack/validation_workers.py): the same
engine, options and report as CDK's own CloudFormationValidatePlugin, and loud failures."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from mlstack import validation_workers
from mlstack.errors import MlstackError
from mlstack.validation import PLUGIN_NAME, add_template_validation, start_template_validation
from mlstack.validation_workers import ENGINE_OPTIONS, ValidationWorker, cdk_tarball, engine_package


def _cdk_member(name: str) -> str:
    with tarfile.open(cdk_tarball()) as archive:
        stream = archive.extractfile(f"package/{name}")
        assert stream is not None
        return stream.read().decode()


@pytest.fixture(scope="module")
def worker() -> ValidationWorker:
    started = start_template_validation(environ={})
    assert started is not None
    return started


def test_the_options_are_the_ones_cdk_passes() -> None:
    # A CDK upgrade that changes what its plugin passes to the engine fails here: copy the new options.
    source = _cdk_member("core/lib/validation/cloudformation-validate-plugin.js")
    (ignored,) = re.findall(r"IGNORE_RULES=new Set\(\[([^\]]*)\]\)", source)
    assert json.loads(f"[{ignored}]") == ENGINE_OPTIONS["exclude"]["ids"]
    call = re.search(r"this\.engine\.validateTemplate\(templateFile,(\{.*?\})\)\}catch", source)
    assert call is not None
    assert call.group(1) == (
        '{detailLevel:"STANDARD",pseudoParameterOverrides:{accountId,region},exclude:{ids:[...IGNORE_RULES],'
        'services:[{ruleId:"W3697",service:"AWS::AutoScaling"}]},severityLevel:"WARN"}'
    )
    assert ENGINE_OPTIONS["exclude"]["services"] == [{"ruleId": "W3697", "service": "AWS::AutoScaling"}]
    assert (ENGINE_OPTIONS["detailLevel"], ENGINE_OPTIONS["severityLevel"]) == ("STANDARD", "WARN")
    # CDK's plugin makes its engine from the Rego rules alone (left out: test_validation) and no Guard rules.
    assert "new(cloudformation_validate_1()).CompositeEngine(config)" in source


def test_the_engine_is_the_one_in_the_installed_aws_cdk_lib(tmp_path: Path) -> None:
    package = engine_package(cdk_tarball(), tmp_path)
    bundled = json.loads(_cdk_member("node_modules/@aws/cloudformation-validate/package.json"))
    assert json.loads((package / "package.json").read_text())["version"] == bundled["version"]
    with tarfile.open(cdk_tarball()) as archive:
        wasm = archive.extractfile("package/node_modules/@aws/cloudformation-validate/bindings_wasm_bg.wasm")
        assert wasm is not None
        assert (package / "bindings_wasm_bg.wasm").read_bytes() == wasm.read()
    # Read once per tarball: the second call finds the folder and writes nothing.
    marker = package / "package.json"
    before = marker.stat().st_mtime_ns
    assert engine_package(cdk_tarball(), tmp_path) == package
    assert marker.stat().st_mtime_ns == before
    assert [p.name for p in package.parent.iterdir()] == [package.name]  # no scratch folder left behind


def _seeded_app(outdir: Path) -> cdk.App:
    """Two stacks with findings of every shape the report has: the same resource finding in both (one violation,
    two resources), a finding with a property path, one on an output and one on a parameter (on no resource: the
    stack's path), errors and a warning."""
    app = cdk.App(outdir=str(outdir), builtin_cloud_formation_validation=False)
    for name, region in (("SeedA", "us-east-1"), ("SeedB", "eu-west-1")):
        stack = cdk.Stack(app, name, env=cdk.Environment(region=region))
        cdk.CfnResource(
            stack, "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1, "BucketName": "UPPER_case"}
        )
        cdk.CfnParameter(stack, "Unused")
    cdk.CfnResource(stack, "Queue", type="AWS::SQS::Queue", properties={"VisibilityTimeout": "abc"})
    cdk.CfnOutput(stack, "Dangling", value=cdk.Fn.ref("Missing"))
    return app


def _report(outdir: Path) -> dict[str, Any]:
    reports = json.loads((outdir / "validation-report.json").read_text())["pluginReports"]
    (report,) = [r for r in reports if r["pluginName"] == PLUGIN_NAME]
    return report  # type: ignore[no-any-return]


def test_the_report_is_the_one_cdks_plugin_gives(tmp_path: Path, worker: ValidationWorker) -> None:
    cdk_app = _seeded_app(tmp_path / "cdk")
    assert add_template_validation(cdk_app, environ={}, worker=None)  # CDK's own plugin
    cdk_app.synth()
    workers_app = _seeded_app(tmp_path / "workers")
    assert add_template_validation(workers_app, environ={}, worker=worker)
    workers_app.synth()
    expected, got = _report(tmp_path / "cdk"), _report(tmp_path / "workers")
    assert got == expected
    # The seed reaches every branch of the conversion (or the equality above proves less than it seems).
    rules = {v["ruleName"]: v for v in got["violations"]}
    assert {"F3002", "F3012", "F3031", "F6101", "W2001"} <= set(rules)
    assert [c["constructPath"] for c in rules["F3002"]["violatingConstructs"]] == ["SeedA/Bucket", "SeedB/Bucket"]
    assert rules["F3002"]["description"].startswith("NotAProperty: ")
    assert rules["F6101"]["violatingConstructs"][0]["constructPath"] == "SeedB"
    assert {c["constructPath"] for c in rules["W2001"]["violatingConstructs"]} == {"SeedA", "SeedB"}
    assert got["pluginVersion"] == worker.version() != "0.0.0"


def test_each_app_has_the_one_plugin(tmp_path: Path, worker: ValidationWorker) -> None:
    # With CDK's built-in registration on, CDK would run its own instance beside the workers' plugin.
    app = _seeded_app(tmp_path)
    add_template_validation(app, environ={}, worker=worker)
    app.synth()
    reports = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]
    assert [r["pluginName"] for r in reports] == [PLUGIN_NAME]


def test_cdk_validation_false_starts_no_worker() -> None:
    assert start_template_validation(environ={"CDK_VALIDATION": "false"}) is None


def test_without_node_cdks_own_plugin_is_registered(tmp_path: Path) -> None:
    worker = ValidationWorker(environ={"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    assert not worker.ready()
    assert "node is not on PATH" in str(worker.start_error)
    app = _seeded_app(tmp_path / "out")
    assert add_template_validation(app, environ={}, worker=worker)
    app.synth()
    assert _report(tmp_path / "out")["violations"]  # CDK's plugin ran in the kernel instead


def test_a_failed_worker_fails_the_validation_with_its_error(tmp_path: Path) -> None:
    worker = ValidationWorker()
    assert worker.ready()
    ok, missing = tmp_path / "ok.template.json", tmp_path / "absent.template.json"
    ok.write_text(json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {"X": 1}}}}))
    stacks = [{"templatePath": str(path), "accountId": None, "region": "us-east-1"} for path in (ok, missing)]
    # In order, one list per template: the first template's finding, before the second one fails.
    (findings,) = worker.validate(stacks[:1])
    assert "'X' was unexpected" in findings[0]["message"]
    with pytest.raises(MlstackError, match=r"template validation failed: .*absent\.template\.json"):
        worker.validate(stacks)
    assert worker.closed  # a worker that failed is not asked again; start_worker starts a new one
    with pytest.raises(MlstackError, match=r"not running: it failed"):
        worker.validate(stacks[:1])


class _FakeWorker:
    def __init__(self, environ: object) -> None:
        self.closed = False


def test_start_worker_gives_the_running_worker_until_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation_workers, "_running", None)
    monkeypatch.setattr(validation_workers, "ValidationWorker", _FakeWorker)
    first = validation_workers.start_worker()
    assert isinstance(first, _FakeWorker)
    assert validation_workers.start_worker() is first
    first.closed = True
    assert validation_workers.start_worker() is not first
