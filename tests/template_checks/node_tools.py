"""The two checkers that come from npm (package.json; `make install` runs `npm ci`), started in the background
right after the test session synthesizes, so that they run beside the tests.

- AWS Guard rules: the `cfn-guard` binary and the Guard rules `@cdklabs/cdk-validator-cfnguard` bundles (the
  Control Tower proactive controls, `CT.<SERVICE>.PR.<n>`), run once over every template, each with the rule files
  that name one of its resource types (`guard_groups`: the others skip it). They read the templates
  as CloudFormation receives them, except that each cross-stack `Fn::GetStackOutput` is replaced by the value
  CloudFormation resolves it to before it creates the resource (a rule that wants a key ARN cannot follow a
  reference into another stack; `KmsKeyId` is then the NetworkStack key's ARN).
- Amazon States Language: `asl-validator` once over every state machine definition, its `DefinitionString`
  resolved (`resolve`: the Lambda ARNs it names keep their shape).

`MLSTACK_NODE_MODULES` points at another node_modules (default: the checkout's).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import run_files
from tests.synth import ROOT
from tests.template_checks.resolve import Stack, resolve

NODE_MODULES = Path(os.environ.get("MLSTACK_NODE_MODULES", ROOT / "node_modules"))
GUARD_PACKAGE = NODE_MODULES / "@cdklabs" / "cdk-validator-cfnguard"
GUARD_RULES = GUARD_PACKAGE / "rules" / "control-tower" / "cfn-guard"
ASL_VALIDATOR = NODE_MODULES / "asl-validator" / "dist" / "bin" / "asl-validator.js"
NODE = NODE_MODULES / ".bin" / "node"
TIMEOUT_S = 600


def guard_binary() -> Path:
    """The package's cfn-guard build for this machine (it ships Linux and macOS, x86_64 and aarch64)."""
    system = {"Linux": "ubuntu", "Darwin": "macos"}.get(platform.system(), platform.system().lower())
    machine = {"arm64": "aarch64", "AMD64": "x86_64"}.get(platform.machine(), platform.machine())
    return GUARD_PACKAGE / "bin" / system / machine / "cfn-guard"


def _without_stack_outputs(stack: Stack, value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"Fn::GetStackOutput"}:
            return resolve(stack, value)
        return {k: _without_stack_outputs(stack, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_stack_outputs(stack, v) for v in value]
    return value


@dataclass
class Run:
    """One background tool run: its process, output file and wall time."""

    name: str
    args: list[str]
    out: Path
    started: float = field(default_factory=time.monotonic)
    process: subprocess.Popen[bytes] | None = None
    seconds: float | None = None

    def start(self) -> Run:
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait(self) -> tuple[int, str]:
        """(exit status, output), once the run has ended: this process's own run, or one the session synth started
        (no `process` here: its end is a file, `tests/run_files.py`)."""
        if self.process is None:
            code, seconds = run_files.wait_for_end(self.out, TIMEOUT_S)
        else:
            code, seconds = self.process.wait(timeout=TIMEOUT_S), time.monotonic() - self.started
        if self.seconds is None:
            self.seconds = seconds
            print(f"\n{self.name}: {self.seconds:.1f} s", file=sys.stderr)
        return code, self.out.read_text(encoding="utf-8", errors="replace")


def start_guard(workdir: Path, stacks: Iterable[tuple[str, Stack]]) -> Run:
    """cfn-guard over every template (one file per stack under `workdir`, named `<blueprint>--<stack>.json`), each
    with the rule files that can apply to it (`guard_groups`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "tests.template_checks.guard_groups", str(guard_binary()), str(GUARD_RULES)]
    for label, stack in stacks:
        path = workdir / (label.replace("/", "--") + ".json")
        path.write_text(json.dumps(_without_stack_outputs(stack, stack.template)), encoding="utf-8")
        args.append(str(path))
    return Run("cfn-guard", args, workdir.parent / "cfn-guard.json").start()


def state_machines(stacks: Iterable[tuple[str, Stack]]) -> dict[str, str]:
    """`<blueprint>/<stack>/<logical ID>` -> resolved definition of every state machine."""
    found = {}
    for label, stack in stacks:
        for logical_id, resource in stack.resources.items():
            if resource["Type"] == "AWS::StepFunctions::StateMachine":
                props = resource["Properties"]
                definition = props.get("DefinitionString") or json.dumps(props["Definition"])
                found[f"{label}/{logical_id}"] = str(resolve(stack, definition))
    return found


def start_asl(workdir: Path, definitions: dict[str, str]) -> Run:
    workdir.mkdir(parents=True, exist_ok=True)
    args = [str(NODE), str(ASL_VALIDATOR)]
    for where, definition in definitions.items():
        path = workdir / (where.replace("/", "--") + ".json")
        path.write_text(definition, encoding="utf-8")
        args += ["--json-path", str(path)]
    return Run("asl-validator", args, workdir.parent / "asl-validator.txt").start()


@dataclass(frozen=True, order=True)
class GuardFinding:
    where: str
    """`<blueprint>/<stack>/<logical ID>`."""
    control: str
    """The control ID the rule reports (`CT.S3.PR.9`), or the rule name where it reports none."""

    def __str__(self) -> str:
        return f"{self.where}: {self.control}"


_CONTROL = re.compile(r"\[(CT\.[A-Z0-9]+\.PR\.[0-9]+)\]")
_RESOURCE = re.compile(r'"/Resources/([^/"]+)')


def guard_findings(report: list[dict[str, Any]]) -> list[GuardFinding]:
    """One finding per (resource, control) that a rule reports not compliant."""
    findings = set()
    for result in report:
        label = Path(result["name"]).stem.replace("--", "/")
        for check in result.get("not_compliant", []):
            text = json.dumps(check)
            control = _CONTROL.search(text)
            name = control.group(1) if control else str(check.get("Rule", {}).get("name"))
            for logical_id in set(_RESOURCE.findall(text)):
                findings.add(GuardFinding(f"{label}/{logical_id}", name))
    return sorted(findings)


def guard_skips(blueprints: dict[str, Any]) -> dict[str, dict[str, str]]:
    """`<blueprint>/<stack>/<logical ID>` -> control -> reason, from `Metadata.guard.skip` (`skip_guard`)."""
    return {
        f"{name}/{stack_id}/{logical_id}": {
            str(entry.get("id")): str(entry.get("reason", ""))
            for entry in resource.get("Metadata", {}).get("guard", {}).get("skip", [])
        }
        for name, bp in blueprints.items()
        for stack_id, template in bp.templates.items()
        for logical_id, resource in template["Resources"].items()
    }


def unskipped_guard_findings(report: list[dict[str, Any]], blueprints: dict[str, Any]) -> list[GuardFinding]:
    """The report's findings that no `Metadata.guard.skip` on their resource names."""
    skips = guard_skips(blueprints)
    return [f for f in guard_findings(report) if f.control not in skips.get(f.where, {})]
