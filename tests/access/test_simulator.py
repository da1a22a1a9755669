"""The policy simulator's process: started once, kept for the next batch, restarted after a failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from mlstack.access import simulator
from mlstack.errors import MlstackError


def _allow_get(bucket: str) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/*"}
    return {
        "principal": "arn:aws:iam::123456789012:role/r",
        "action": "s3:GetObject",
        "resource": "arn:aws:s3:::b/k",
        "account": "123456789012",
        "context": {},
        "identity": [{"name": "p", "policy": {"Version": "2012-10-17", "Statement": [statement]}}],
        "managed": [],
        "boundary": [],
        "resourcePolicy": None,
    }


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The simulator processes started while the test runs (their PIDs); none is running at its start."""
    simulator.close()
    started: list[int] = []
    start = simulator._Process.__init__

    def counting(self: simulator._Process, modules: Any) -> None:
        start(self, modules)
        started.append(self.popen.pid)

    monkeypatch.setattr(simulator._Process, "__init__", counting)
    yield started
    simulator.close()


def test_batches_share_one_process(starts: list[int]) -> None:
    first = simulator.run_batch([_allow_get("b"), _allow_get("other")])
    second = simulator.run_batch([_allow_get("other")])
    assert [r["decision"] for r in first] == ["Allowed", "ImplicitlyDenied"]
    assert [r["decision"] for r in second] == ["ImplicitlyDenied"]
    assert len(starts) == 1
    assert simulator.run_batch([]) == []
    assert len(starts) == 1


def test_an_unreadable_batch_fails_with_stderr_and_the_next_call_starts_again(starts: list[int]) -> None:
    assert simulator.run_batch([_allow_get("b")])[0]["decision"] == "Allowed"
    with pytest.raises(MlstackError, match=r"(?s)the policy simulator failed: .*requests is not iterable"):
        simulator.run_batch(cast(Any, {"not": "a list"}))
    assert simulator.run_batch([_allow_get("b")])[0]["decision"] == "Allowed"
    assert len(starts) == 2 and starts[0] != starts[1]


def test_close_ends_the_process(starts: list[int]) -> None:
    simulator.run_batch([])
    process = simulator._running
    assert process is not None and process.popen.poll() is None
    simulator.close()
    assert process.popen.poll() == 0 and simulator._running is None


def test_a_call_interrupted_before_its_reply_leaves_no_reply_for_the_next_call(
    starts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    receive = simulator._Process.receive

    def interrupted(self: simulator._Process) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulator._Process, "receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        simulator.run_batch([_allow_get("b")])  # sent; its "Allowed" reply is never read
    monkeypatch.setattr(simulator._Process, "receive", receive)
    assert [r["decision"] for r in simulator.run_batch([_allow_get("other")])] == ["ImplicitlyDenied"]
    assert len(starts) == 2


def test_a_reply_that_is_not_json_fails_the_call_and_ends_the_process(
    starts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    simulator.run_batch([])
    process = simulator._running
    assert process is not None and process.popen.stdout is not None
    monkeypatch.setattr(process.popen.stdout, "readline", lambda: "Warning: something\n")
    with pytest.raises(MlstackError, match="the policy simulator failed"):
        simulator.run_batch([_allow_get("b")])
    assert process.popen.poll() is not None
    assert simulator.run_batch([_allow_get("b")])[0]["decision"] == "Allowed"
