"""CDK's template validation as mlstack registers it (mlstack/validation.py): on, once per process, without the
CDK's Rego rules, which concern only resource types no blueprint uses; run by a worker process
(mlstack/validation_workers.py) with the same engine, options, report and analytics as CDK's own plugin, and
failures that fail loudly or fall back to CDK's plugin."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from mlstack import kernel, validation_workers
from mlstack.errors import MlstackError
from mlstack.validation import (
    WorkerTemplateValidation,
    add_template_validation,
    report_violations,
    start_template_validation,
    template_validation,
)
from mlstack.validation_engine import ENGINE_MARKER, ENGINE_OPTIONS, cdk_tarball, engine_package
from mlstack.validation_workers import ValidationWorker, WorkerGoneError
from tests.synth import Session

PLUGIN = "CloudFormation Validate"

RULES_LEFT_OUT = {"gamelift-fleet.rego": "AWS::GameLift::"}
"""The CDK default Rego rules of the installed aws-cdk-lib -> the resource types they check."""


_ENGINE = "package/node_modules/@aws/cloudformation-validate/"
_PLUGIN_JS = "package/core/lib/validation/cloudformation-validate-plugin.js"
_RULES = "package/core/lib/validation/rules/"


@pytest.fixture(scope="module")
def cdk_files() -> dict[str, bytes]:
    """What this module reads of aws-cdk-lib's jsii tarball (its JavaScript ships inside the Python package), read
    in one pass: the tarball is gzip, so each lookup by name would read it from the start again."""
    spec = importlib.util.find_spec("aws_cdk._jsii")
    assert spec is not None and spec.origin is not None
    (tarball,) = Path(spec.origin).parent.glob("aws-cdk-lib@*.jsii.tgz")
    assert tarball == cdk_tarball()
    wanted = (_PLUGIN_JS, f"{_ENGINE}package.json", f"{_ENGINE}bindings_wasm_bg.wasm")
    files: dict[str, bytes] = {}
    with tarfile.open(tarball) as archive:
        for member in archive:
            if member.name in wanted or (member.name.startswith(_RULES) and member.name.endswith(".rego")):
                stream = archive.extractfile(member)
                assert stream is not None
                files[member.name] = stream.read()
    return files


def test_the_left_out_default_rules_are_the_ones_cdk_ships(cdk_files: dict[str, bytes]) -> None:
    # A CDK upgrade that adds default rules fails here: decide whether mlstack's templates need them, then list
    # them (and the types they check) or include the defaults again in mlstack/validation.py.
    assert {Path(name).name for name in cdk_files if name.startswith(_RULES)} == set(RULES_LEFT_OUT)


def test_no_blueprint_has_a_resource_the_left_out_rules_check(session: Session) -> None:
    found = [
        f"{name}/{stack_id}: {resource['Type']}"
        for name, bp in session.blueprints.items()
        for stack_id, template in bp.templates.items()
        for resource in template.get("Resources", {}).values()
        if resource["Type"].startswith(tuple(RULES_LEFT_OUT.values()))
    ]
    assert found == []


def test_the_session_synth_ran_the_template_validation(session: Session) -> None:
    # The clean-report gate (test_gates) would pass with no validation at all: the plugin's report must be there.
    names = [report["pluginName"] for report in session.validation_report.get("pluginReports", [])]
    assert names.count(PLUGIN) == 1


def _seeded_app(outdir: Path) -> cdk.App:
    app = cdk.App(outdir=str(outdir))
    cdk.CfnResource(cdk.Stack(app, "Seed"), "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1})
    return app


def test_a_schema_violation_is_reported_once_by_the_registered_plugin(tmp_path: Path) -> None:
    app = _seeded_app(tmp_path)
    assert add_template_validation(app, environ={})
    app.synth()
    reports = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]
    assert [r["pluginName"] for r in reports] == [PLUGIN]  # in place of CDK's instance, not beside it
    (violation,) = reports[0]["violations"]
    assert violation["ruleName"] == "F3002" and "NotAProperty" in violation["description"]
    assert violation["violatingConstructs"][0]["constructPath"] == "Seed/Bucket"


def test_cdk_validation_false_registers_nothing(tmp_path: Path) -> None:
    # `cdk synth --no-validation` sets CDK_VALIDATION=false in the app's environment; CDK then skips its own
    # instance too. (Only the registration is checked: the running kernel read its environment at its start.)
    assert not add_template_validation(_seeded_app(tmp_path), environ={"CDK_VALIDATION": "false"})


def test_one_plugin_serves_every_app() -> None:
    assert template_validation() is template_validation()


# The worker (mlstack/validation_workers.py).


@pytest.fixture(scope="module")
def worker() -> ValidationWorker:
    started = start_template_validation()
    assert started is not None and started.ready(), started and started.start_error
    return started


def test_the_options_are_the_ones_cdk_passes(cdk_files: dict[str, bytes]) -> None:
    # A CDK upgrade that changes what its plugin passes to the engine fails here: copy the new options.
    source = cdk_files[_PLUGIN_JS].decode()
    (ignored,) = re.findall(r"IGNORE_RULES=new Set\(\[([^\]]*)\]\)", source)
    assert json.loads(f"[{ignored}]") == ENGINE_OPTIONS["exclude"]["ids"]
    assert (
        'this.engine.validateTemplate(templateFile,{detailLevel:"STANDARD",pseudoParameterOverrides:{accountId,region},'
        'exclude:{ids:[...IGNORE_RULES],services:[{ruleId:"W3697",service:"AWS::AutoScaling"}]},severityLevel:"WARN"})'
    ) in source
    assert ENGINE_OPTIONS["exclude"]["services"] == [{"ruleId": "W3697", "service": "AWS::AutoScaling"}]
    assert (ENGINE_OPTIONS["detailLevel"], ENGINE_OPTIONS["severityLevel"]) == ("STANDARD", "WARN")
    # The engine from the Rego rules alone (left out, above) and no Guard rules; the rule IDs it reports.
    assert "new(cloudformation_validate_1()).CompositeEngine(config)" in source
    assert (
        'get ruleIds(){return this.engine.listRules().filter(r=>!IGNORE_RULES.has(r.id)&&r.severity!=="INFO"'
        '&&r.severity!=="DEBUG").map(r=>r.id)}'
    ) in source


@pytest.fixture(scope="module")
def engine_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root with the engine read out once, under the 002 umask of Ubuntu's and Fedora's users (which must
    not make the copy look shared to the next run)."""
    root = tmp_path_factory.mktemp("engine-cache")
    previous = os.umask(0o002)
    try:
        engine_package(cdk_tarball(), root)
    finally:
        os.umask(previous)
    return root


def test_the_engine_is_the_one_in_the_installed_aws_cdk_lib(
    tmp_path: Path, engine_root: Path, cdk_files: dict[str, bytes]
) -> None:
    root = tmp_path / "root"
    shutil.copytree(engine_root, root)
    package = engine_package(cdk_tarball(), root)  # found whole: nothing written
    bundled = json.loads(cdk_files[f"{_ENGINE}package.json"])
    assert json.loads((package / "package.json").read_text())["version"] == bundled["version"]
    wasm_bytes = cdk_files[f"{_ENGINE}bindings_wasm_bg.wasm"]
    assert (package / "bindings_wasm_bg.wasm").read_bytes() == wasm_bytes
    assert (package.parent.stat().st_mode & 0o777) == 0o700
    # Read once per tarball: the second call finds the folder whole and writes nothing.
    before = (package / ENGINE_MARKER).stat().st_mtime_ns
    assert engine_package(cdk_tarball(), root) == package
    assert (package / ENGINE_MARKER).stat().st_mtime_ns == before
    assert [p.name for p in package.parent.iterdir()] == [package.name]  # no scratch folder left behind
    # A copy cut short (a file not at its size) is read out again, not used.
    (package / "bindings_wasm_bg.wasm").write_bytes(b"cut short")
    assert engine_package(cdk_tarball(), root) == package
    assert (package / "bindings_wasm_bg.wasm").read_bytes() == wasm_bytes
    assert [p.name for p in package.parent.iterdir()] == [package.name]


def test_a_cache_other_users_can_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cloudformation-validate").mkdir(mode=0o777)
    (tmp_path / "cloudformation-validate").chmod(0o777)
    with pytest.raises(MlstackError, match="not private to this user"):
        engine_package(cdk_tarball(), tmp_path)


def test_an_engine_that_does_not_load_falls_back_and_keeps_the_cache(tmp_path: Path, engine_root: Path) -> None:
    shutil.copytree(engine_root, tmp_path / "mlstack")
    package = engine_package(cdk_tarball(), tmp_path / "mlstack")
    wasm = package / "bindings_wasm_bg.wasm"
    wasm.write_bytes(b"\0" * wasm.stat().st_size)  # whole by its size: only loading it can tell
    damaged = ValidationWorker(environ={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert not damaged.ready()
    assert "did not start" in str(damaged.start_error)
    assert package.is_dir()  # nothing deleted that another process could be loading


def _seeded_errors_app(outdir: Path) -> cdk.App:
    """Two stacks (one pinned to an account and region, one not) with findings of every shape the report has: the
    same resource finding in both (one violation, two resources), findings with property paths, one on an output
    and one on a parameter (on no resource: the stack's path). Findings are errors, as in make test."""
    app = cdk.App(
        outdir=str(outdir),
        builtin_cloud_formation_validation=False,
        context={"@aws-cdk/core:validateAgainstDefaultRules": True},
    )
    pinned = cdk.Stack(app, "SeedA", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    for stack in (pinned, cdk.Stack(app, "SeedB")):
        cdk.CfnResource(
            stack, "Bucket", type="AWS::S3::Bucket", properties={"NotAProperty": 1, "BucketName": "UPPER_case"}
        )
        cdk.CfnParameter(stack, "Unused")
    cdk.CfnResource(stack, "Queue", type="AWS::SQS::Queue", properties={"VisibilityTimeout": "abc"})
    cdk.CfnOutput(stack, "Dangling", value=cdk.Fn.ref("Missing"))
    return app


def _report(outdir: Path) -> dict[str, Any]:
    reports = json.loads((outdir / "validation-report.json").read_text())["pluginReports"]
    (report,) = [r for r in reports if r["pluginName"] == PLUGIN]
    return report  # type: ignore[no-any-return]


def _synth_failing(app: cdk.App) -> None:
    with pytest.raises(RuntimeError, match=r"ValidationFailed|Validation failed"):
        app.synth()


def test_the_report_is_the_one_cdks_plugin_gives(
    tmp_path: Path, worker: ValidationWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    cdk_app = _seeded_errors_app(tmp_path / "cdk")
    assert add_template_validation(cdk_app, environ={}, worker=None)  # CDK's own plugin
    _synth_failing(cdk_app)
    workers_app = _seeded_errors_app(tmp_path / "worker")
    assert add_template_validation(workers_app, environ={}, worker=worker)
    _synth_failing(workers_app)
    assert "validating in the CDK kernel instead" not in capsys.readouterr().err  # the worker's own report
    expected, got = _report(tmp_path / "cdk"), _report(tmp_path / "worker")
    assert got == expected
    # The seed reaches every branch of the conversion (or the equality above proves less than it seems).
    assert got["conclusion"] == "failure"
    rules = {v["ruleName"]: v for v in got["violations"]}
    assert {"F3002", "F3012", "F3031", "F6101", "W2001"} <= set(rules)
    assert {v["severity"] for v in got["violations"]} == {"error", "warning"}
    assert [c["constructPath"] for c in rules["F3002"]["violatingConstructs"]] == ["SeedA/Bucket", "SeedB/Bucket"]
    assert rules["F3002"]["description"].startswith("NotAProperty: ")
    assert rules["F6101"]["violatingConstructs"][0]["constructPath"] == "SeedB"
    assert {c["constructPath"] for c in rules["W2001"]["violatingConstructs"]} == {"SeedA", "SeedB"}


def test_the_worker_runs_single_threaded_with_the_preload_and_the_default_young_generation(
    worker: ValidationWorker,
) -> None:
    pid = worker._started().popen.pid
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--single-threaded" in command
    environ = dict(
        line.split(b"=", 1) for line in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in line
    )
    options = environ.get(b"NODE_OPTIONS", b"").decode()
    assert str(kernel.PRELOAD) in options and kernel.SEMI_SPACE not in options


def test_the_version_and_rule_ids_are_the_ones_cdks_plugin_gives(worker: ValidationWorker) -> None:
    # CDK writes both into CDKMetadata's analytics: a difference changes every stack `cdk synth` writes.
    plugin = WorkerTemplateValidation(worker)
    own = template_validation()
    assert (plugin.name, plugin.version, plugin.rule_ids) == (own.name, own.version, own.rule_ids)
    assert len(plugin.rule_ids) > 100


def test_fixes_and_categories_are_carried_over() -> None:
    # No seeded finding has a suggested fix; the conversion is checked against CDK's code here.
    stacks = [{"templatePath": "/out/A.template.json"}, {"templatePath": "/out/B.template.json"}]
    found = {"ruleId": "W1", "severity": "WARN", "message": "m", "propertyPath": "Properties.X.Y"}
    diagnostics: list[list[dict[str, Any]]] = [
        [{**found, "logicalId": "R", "suggestedFix": "do this", "category": "Security"}],
        [{**found, "logicalId": None, "suggestedFix": None, "category": None}, {**found, "severity": "INFO"}],
    ]
    violations = report_violations(stacks, ["A", "B"], diagnostics)
    assert [(v["severity"], v["fix"], v["ruleMetadata"]) for v in violations] == [
        ("warning", "do this", {"category": "Security"}),
        ("informational", None, None),
    ]
    assert violations[0]["description"] == "X.Y: m"
    where = {"templatePath": "/out/A.template.json", "locations": ["Properties.X.Y"]}
    assert violations[0]["violatingResources"] == [
        {"resourceLogicalId": "R", "constructPath": None, **where},
        {"resourceLogicalId": None, "constructPath": "B", **where, "templatePath": "/out/B.template.json"},
    ]


def test_cdk_validation_false_starts_no_worker() -> None:
    assert start_template_validation(environ={"CDK_VALIDATION": "false"}) is None


def test_without_node_cdks_own_plugin_is_registered(tmp_path: Path) -> None:
    without = ValidationWorker(environ={"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    assert not without.ready()
    assert "node is not on PATH" in str(without.start_error)
    app = _seeded_errors_app(tmp_path / "out")
    assert add_template_validation(app, environ={}, worker=without)
    _synth_failing(app)
    assert _report(tmp_path / "out")["violations"]  # CDK's plugin ran in the kernel instead


def test_a_template_the_engine_fails_on_fails_the_validation_and_keeps_the_worker(
    tmp_path: Path, worker: ValidationWorker
) -> None:
    ok, missing = tmp_path / "ok.template.json", tmp_path / "absent.template.json"
    ok.write_text(json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {"X": 1}}}}))
    stacks = [{"templatePath": str(path), "accountId": None, "region": "us-east-1"} for path in (ok, missing, ok)]
    with pytest.raises(MlstackError, match=r"template validation failed: .*absent\.template\.json"):
        worker.validate(stacks)
    # In order, one list per template; the worker is still up.
    first, second = worker.validate([stacks[0], stacks[0]])
    assert first == second and "'X' was unexpected" in first[0]["message"]


def test_an_interrupted_request_ends_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its reply would otherwise be read as the next request's.
    own = ValidationWorker()
    assert own.ready()

    def interrupted() -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(own._started(), "receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        own.validate([{"templatePath": str(tmp_path / "t.json"), "accountId": None, "region": None}])
    assert own.closed
    with pytest.raises(WorkerGoneError, match="not running: a request was interrupted"):
        own.validate([])


def test_closing_a_worker_that_is_starting_ends_its_process(tmp_path: Path) -> None:
    # An engine that takes long to make (a preload that sleeps 30 s): close() ends it instead of waiting.
    slow = tmp_path / "slow.cjs"
    slow.write_text("Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 30000)\n")
    options = f"{os.environ.get('NODE_OPTIONS', '')} --require {slow}"
    starting = ValidationWorker(environ={**os.environ, "NODE_OPTIONS": options})
    for _ in range(3000):
        if starting._spawned is not None:
            break
        time.sleep(0.01)
    assert starting._spawned is not None
    starting.close()
    assert starting._spawned.popen.returncode is not None
    assert "did not start" in str(starting.start_error)  # ended before its first line, not after
    assert starting.closed


def test_an_engine_failure_during_synth_fails_the_plugin_not_the_synth(
    tmp_path: Path, worker: ValidationWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CDK turns a plugin's exception into a failed report of that plugin (cdk-nag's report is still written).
    def failing(stacks: object) -> object:
        raise MlstackError("template validation failed: /out/x.template.json: engine says no")

    monkeypatch.setattr(worker, "validate", failing)
    app = _seeded_errors_app(tmp_path)
    add_template_validation(app, environ={}, worker=worker)
    _synth_failing(app)
    report = _report(tmp_path)
    assert report["conclusion"] == "failure"
    assert "engine says no" in json.dumps(report)
    assert report["pluginVersion"] == worker.version != "0.0.0"


class _FakeWorker:
    def __init__(self, environ: object) -> None:
        self.closed = self.close_called = False

    def close(self) -> None:
        self.close_called = True


def test_start_worker_gives_the_running_worker_until_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation_workers, "_running", None)
    monkeypatch.setattr(validation_workers, "ValidationWorker", _FakeWorker)
    first = validation_workers.start_worker()
    assert isinstance(first, _FakeWorker)
    assert validation_workers.start_worker() is first
    first.closed = True
    assert validation_workers.start_worker() is not first
    assert first.close_called  # its files (the script's copy from a zipped install) are released


def test_a_worker_that_died_hands_over_to_cdks_plugin(
    tmp_path: Path, worker: ValidationWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    # Last in the module: it ends the module's worker (the process's: start_worker starts a new one after it).
    app = _seeded_errors_app(tmp_path)
    assert add_template_validation(app, environ={}, worker=worker)
    worker._started().popen.kill()
    _synth_failing(app)
    assert worker.closed
    assert "validating in the CDK kernel instead" in capsys.readouterr().err
    assert {v["ruleName"] for v in _report(tmp_path)["violations"]} >= {"F3002", "F6101"}
