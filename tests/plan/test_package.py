"""The plan package: one module per layer, no import cycle, no CDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mlstack.plan

PLAN_DIR = Path(mlstack.plan.__file__).parent
LAYERS = (
    "network",
    "training",
    "training_engines",
    "training_elastic",
    "training_hyperpod_elastic",
    "operations",
    "inference",
    "inference_cost",
    "inference_eks",
    "inference_eks_pools",
    "serving",
    "mlops",
    "ai_services",
)
"""`serving`: the LLM tokens/s and $ per million tokens both inference layers print; `inference_eks_pools`: the
EKS serving nodes' Karpenter pools; `inference_cost`: the SageMaker endpoints' instances at traffic and $/h."""


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at module level) for every `import` / `from ... import` in a file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, id(node) in top))
        elif isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top) for alias in node.names]
    return out


def test_one_module_per_layer_plus_model_build_and_render() -> None:
    names = {p.stem for p in PLAN_DIR.glob("*.py")} - {"__init__"}
    assert names == {*LAYERS, "model", "build", "render", "supporting"}


def test_layer_modules_import_the_model_only_and_nothing_lazily() -> None:
    # Layer modules take the data model from `mlstack.plan.model` (and may share a sibling layer's helpers); only
    # `build` imports them all. An import of `mlstack.plan` itself, of `build` or of a stack would close a cycle.
    for path in PLAN_DIR.glob("*.py"):
        for module, top_level in _imports(path):
            assert top_level, f"{path.name}: lazy import of {module}"
            assert not module.startswith("aws_cdk") and not module.startswith("mlstack.stacks"), (path.name, module)
            if path.stem in LAYERS:
                assert module not in {"mlstack.plan", "mlstack.plan.build", "mlstack.plan.render"}, (path.name, module)


def test_planning_every_shipped_blueprint_does_not_import_the_cdk() -> None:
    # `mlstack plan` must not start jsii/Node.
    code = (
        "import sys\n"
        "from mlstack.config import BLUEPRINTS_DIR, load\n"
        "from mlstack.plan import build_plan, render\n"
        "for path in sorted(BLUEPRINTS_DIR.glob('*.yaml')):\n"
        "    render(build_plan(load(path)))\n"
        "assert not [m for m in sys.modules if m.startswith('aws_cdk')], 'aws_cdk imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
