"""Which tests read which background run, and which test modules declare variants: node IDs only.

Importable without aws_cdk (importing it starts a jsii kernel): `tests/scheduling.py` reads these names, and a
test runs a nested pytest-xdist run with only the scheduler (tests/test_session_synth.py).
"""

from __future__ import annotations

VARIANT_MODULES = (
    "tests/training/test_cost_guardrails_karpenter.py",
    "tests/training/test_cost_guardrails.py",
    "tests/inference_eks/test_variants.py",
)
"""The test modules that declare `SESSION_VARIANTS` (tests/variants.py)."""

GATE_TEST = "test_the_variants_pass_the_gates"
"""Each variant module's test that reads its variants' findings (`gate_problems`): a reader of cfn-lint, checkov
and cfn-guard, so those runs start whenever it is selected, and it runs after the tests that read no checker."""
GATE_READERS = tuple(f"{module}::{GATE_TEST}" for module in VARIANT_MODULES)

GATE_RUN_READERS: dict[str, tuple[str, ...]] = {
    "cfn-lint": ("tests/blueprints/test_gates.py::test_cfn_lint_finds_no_errors_or_warnings", *GATE_READERS),
    "checkov": ("tests/blueprints/test_checkov.py", *GATE_READERS),
}
"""The runs of tests/blueprints/gate_runs.py."""

NODE_RUN_READERS: dict[str, tuple[str, ...]] = {
    "cfn-guard": ("tests/template_checks/test_guard.py", *GATE_READERS),
    "asl-validator": ("tests/template_checks/test_asl.py",),
}
"""The runs of tests/template_checks/background.py."""

READERS: dict[str, tuple[str, ...]] = {**GATE_RUN_READERS, **NODE_RUN_READERS}
"""Checker -> the tests (node ID prefixes) that read its report: a run starts only when one of them is selected."""
