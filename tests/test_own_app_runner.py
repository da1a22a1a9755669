"""The own-app runner (tests/own_app.py) sees an example that loads the blueprint schema, and only that one."""

from __future__ import annotations

from pathlib import Path

from tests.own_app import run_examples

# Stand-ins for a CDK app: the runner only calls app.synth().get_stack_by_name(stack.stack_name).template.
_FAKE_APP = """
class _Assembly:
    def get_stack_by_name(self, name):
        return type("Stack", (), {"template": {"Resources": {}, "Name": name}})()
class _App:
    def synth(self):
        return _Assembly()
app = _App()
stack = type("S", (), {"stack_name": "S"})()
"""


def test_the_runner_names_the_schema_modules_an_example_loads(tmp_path: Path) -> None:
    results = run_examples(
        [("loads", "import mlstack.config\n" + _FAKE_APP), ("clean", _FAKE_APP)],
        tmp_path,
    )
    assert "mlstack.config" in results["loads"]["schema_modules"]
    assert results["clean"]["schema_modules"] == []
    assert results["clean"]["template"]["Name"] == "S"
