"""Run each layer README's "Use it from your own CDK app" example as written, in a fresh interpreter.

The example must define `app` and `stack`; the runner returns the stack's synthesized template and the blueprint
schema modules (`mlstack.config*`) the example loaded, which must be none: constructs take keyword props only.

All the layers' examples run in one interpreter that imported nothing of mlstack before them, one after another,
each with globals of its own (so each needs exactly the imports it shows): one jsii kernel start instead of one
per layer. An example's schema modules are those loaded while it ran; a module an earlier example loaded counts
against that one (and fails its test first).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

CONSTRUCTS = Path(__file__).resolve().parents[1] / "mlstack" / "constructs"
HEADING = "## Use it from your own CDK app"

LAYERS = ("network", "storage", "training", "sagemaker", "ai_services")
"""The layers whose README has an own-app example that a test runs."""

_RUNNER = """
import json, sys
results = {}
for layer, code in json.load(sys.stdin):
    before = set(sys.modules)
    scope = {"__name__": "__main__"}
    exec(compile(code, layer + "/README.md", "exec"), scope)
    app, stack = scope["app"], scope["stack"]
    template = app.synth().get_stack_by_name(stack.stack_name).template
    loaded = sorted(m for m in set(sys.modules) - before if m.split(".")[:2] == ["mlstack", "config"])
    results[layer] = {"template": template, "schema_modules": loaded}
json.dump(results, sys.stdout)
"""

_RESULTS: dict[str, dict[str, Any]] = {}


def example_code(layer: str) -> str:
    """The first Python block under the heading in `mlstack/constructs/<layer>/README.md`."""
    text = (CONSTRUCTS / layer / "README.md").read_text(encoding="utf-8")
    assert HEADING in text, f"{layer}/README.md has no {HEADING!r} section"
    match = re.search(r"```python\n(.*?)```", text.split(HEADING, 1)[1], re.DOTALL)
    assert match, f"{layer}/README.md: the own-app section has no python block"
    return match.group(1)


def run_example(layer: str, cwd: Path) -> dict[str, Any]:
    """The result of `layer`'s example; the first call runs every layer's (in `cwd`) and keeps the results."""
    assert layer in LAYERS, f"add {layer!r} to tests/own_app.LAYERS"
    if not _RESULTS:
        _RESULTS.update(run_examples([(name, example_code(name)) for name in LAYERS], cwd))
    return _RESULTS[layer]


def run_examples(examples: list[tuple[str, str]], cwd: Path) -> dict[str, dict[str, Any]]:
    """(layer, code) examples run in order in one fresh interpreter -> layer -> template and schema modules."""
    run = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(examples),
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results: dict[str, dict[str, Any]] = json.loads(run.stdout)
    return results


def resources(template: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [r for r in template["Resources"].values() if r["Type"] == type_]
    return found
