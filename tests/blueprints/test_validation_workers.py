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
from mlstack.validation_workers import ENGINE_OPTIONS, WorkerPool, cdk_tarball, deal, engine_package


def _cdk_member(name: str) -> str:
    with tarfile.open(cdk_tarball()) as archive:
        stream = archive.extractfile(f"package/{name}")
        assert stream is not None
        return stream.read().decode()


@pytest.fixture(scope="module")
def pool() -> WorkerPool:
    started = start_template_validation(workers=1, environ={})
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


def test_the_report_is_the_one_cdks_plugin_gives(tmp_path: Path, pool: WorkerPool) -> None:
    cdk_app = _seeded_app(tmp_path / "cdk")
    assert add_template_validation(cdk_app, environ={}, pool=None)  # CDK's own plugin
    cdk_app.synth()
    workers_app = _seeded_app(tmp_path / "workers")
    assert add_template_validation(workers_app, environ={}, pool=pool)
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
    assert got["pluginVersion"] == pool.version() != "0.0.0"


def test_each_app_has_the_one_plugin(tmp_path: Path, pool: WorkerPool) -> None:
    # With CDK's built-in registration on, CDK would run its own instance beside the workers' plugin.
    app = _seeded_app(tmp_path)
    add_template_validation(app, environ={}, pool=pool)
    app.synth()
    reports = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]
    assert [r["pluginName"] for r in reports] == [PLUGIN_NAME]


def test_cdk_validation_false_starts_no_worker() -> None:
    assert start_template_validation(workers=1, environ={"CDK_VALIDATION": "false"}) is None


def test_without_node_cdks_own_plugin_is_registered(tmp_path: Path) -> None:
    pool = WorkerPool(1, environ={"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    assert not pool.ready()
    assert "node is not on PATH" in str(pool.start_error)
    app = _seeded_app(tmp_path / "out")
    assert add_template_validation(app, environ={}, pool=pool)
    app.synth()
    assert _report(tmp_path / "out")["violations"]  # CDK's plugin ran in the kernel instead


def test_a_failed_worker_fails_the_validation_with_its_error(tmp_path: Path) -> None:
    pool = WorkerPool(1)
    assert pool.ready()
    missing = {"templatePath": str(tmp_path / "absent.template.json"), "accountId": None, "region": None}
    with pytest.raises(MlstackError, match=r"template validation failed: .*absent\.template\.json"):
        pool.validate([missing])
    assert pool.closed  # a worker that failed is not asked again; start_pool makes a new pool
    with pytest.raises(MlstackError, match=r"did not start: the workers were closed"):
        pool.validate([missing])


def test_the_pool_gives_results_in_the_order_asked(tmp_path: Path) -> None:
    pool = WorkerPool(2)
    try:
        stacks = []
        for index, body in enumerate([_bucket_template(None), _bucket_template("NotAProperty"), _bucket_template("X")]):
            path = tmp_path / f"t{index}.template.json"
            path.write_text(body)
            stacks.append({"templatePath": str(path), "accountId": None, "region": "us-east-1"})
        results = pool.validate(stacks)
        assert results[0] == []
        assert "'NotAProperty' was unexpected" in results[1][0]["message"]
        assert "'X' was unexpected" in results[2][0]["message"]
    finally:
        pool.close()


def _bucket_template(prop: str | None) -> str:
    properties = {prop: 1} if prop else {}
    return json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": properties}}})


@pytest.mark.parametrize(
    ("sizes", "workers", "shares"),
    [
        ([10, 30, 20], 1, [[1, 2, 0]]),
        ([10, 30, 20, 5], 2, [[1, 3], [2, 0]]),
        ([5, 5], 3, [[0], [1], []]),
        ([], 2, [[], []]),
    ],
)
def test_templates_are_dealt_largest_first_to_the_least_loaded(
    sizes: list[int], workers: int, shares: list[list[int]]
) -> None:
    assert deal(sizes, workers) == shares


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool(0)


class _FakePool:
    def __init__(self, count: int, environ: object) -> None:
        self.count, self.closed = count, False


def test_start_pool_gives_the_running_pool_until_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation_workers, "_pools", {})
    monkeypatch.setattr(validation_workers, "WorkerPool", _FakePool)
    first = validation_workers.start_pool(1)
    assert isinstance(first, _FakePool)
    assert validation_workers.start_pool(1) is first
    assert validation_workers.start_pool(2) is not first
    first.closed = True
    assert validation_workers.start_pool(1) is not first
