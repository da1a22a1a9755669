"""Run a layer README's "Use it from your own CDK app" example as written, in a fresh interpreter.

The example must define `app` and `stack`; the runner returns the stack's synthesized template and the blueprint
schema modules (`mlstack.config*`) the example loaded, which must be none: constructs take keyword props only.
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

_RUNNER = """
import json, sys
{example}
template = app.synth().get_stack_by_name(stack.stack_name).template
loaded = sorted(m for m in sys.modules if m.split(".")[:2] == ["mlstack", "config"])
json.dump({{"template": template, "schema_modules": loaded}}, sys.stdout)
"""


def example_code(layer: str) -> str:
    """The first Python block under the heading in `mlstack/constructs/<layer>/README.md`."""
    text = (CONSTRUCTS / layer / "README.md").read_text(encoding="utf-8")
    assert HEADING in text, f"{layer}/README.md has no {HEADING!r} section"
    match = re.search(r"```python\n(.*?)```", text.split(HEADING, 1)[1], re.DOTALL)
    assert match, f"{layer}/README.md: the own-app section has no python block"
    return match.group(1)


def run_example(layer: str, cwd: Path) -> dict[str, Any]:
    code = _RUNNER.format(example=example_code(layer))
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=cwd, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def resources(template: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [r for r in template["Resources"].values() if r["Type"] == type_]
    return found
