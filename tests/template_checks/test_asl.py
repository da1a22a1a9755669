"""Amazon States Language: every state machine definition of every template passes `asl-validator` (npm), its
`DefinitionString` resolved with plausible ARNs (`node_tools.state_machines`)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.synth import Session
from tests.template_checks import background, node_tools
from tests.template_checks.resolve import session_stacks


def test_every_state_machine_definition_is_valid_states_language(gated: Session) -> None:
    # The shipped blueprints' and the variants' (tests/variants.py).
    definitions = node_tools.state_machines(session_stacks(gated.blueprints))
    code, output = background.run(gated, "asl-validator").wait()
    if not definitions:  # a MLSTACK_TEST_BLUEPRINTS selection without a state machine
        return
    assert code == 0, output
    assert output.count("is valid") == len(definitions), output


def test_asl_validator_sees_a_seeded_defect(tmp_path: Path, session: Session) -> None:
    # A state whose Next names no state, and a Task without a Resource.
    broken = {
        "StartAt": "A",
        "States": {"A": {"Type": "Pass", "Next": "Missing"}, "B": {"Type": "Task", "End": True}},
    }
    run = node_tools.start_asl(tmp_path / "asl", {"seed": json.dumps(broken)})
    code, output = run.wait()
    assert code != 0 and "is valid" not in output, output
