"""`mlstack precheck` on a blueprint with a budget: its `mlstack:blueprint` tag must be active for cost allocation
(Cost Explorer ListCostAllocationTags, answered by botocore's Stubber)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from mlstack import cli
from mlstack import config as blueprint_config
from mlstack.errors import InputError
from mlstack.precheck import run_precheck

NAME = "eks-g6e-training"
REQUEST = {"TagKeys": ["mlstack:blueprint"], "Type": "UserDefined"}


class _Session:
    """A boto3 session stand-in whose Cost Explorer client is stubbed (the only client the check creates)."""

    def __init__(self) -> None:
        self.ce = boto3.client(
            "ce", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        self.stubber = Stubber(self.ce)
        self.regions: list[str | None] = []

    def client(self, service: str, region_name: str | None = None) -> Any:
        assert service == "ce"
        self.regions.append(region_name)
        return self.ce


@pytest.fixture
def session() -> Iterator[_Session]:
    s = _Session()
    with s.stubber:
        yield s
    s.stubber.assert_no_pending_responses()


def _tags(status: str | None) -> dict[str, Any]:
    if status is None:
        return {"CostAllocationTags": []}
    return {"CostAllocationTags": [{"TagKey": "mlstack:blueprint", "Type": "UserDefined", "Status": status}]}


def test_active_tag_passes(session: _Session) -> None:
    session.stubber.add_response("list_cost_allocation_tags", _tags("Active"), REQUEST)
    result = run_precheck(blueprint_config.load(NAME), session)
    assert result.problems == [] and result.notes == []
    assert session.regions == ["us-east-1"]


def test_inactive_tag_is_a_problem_with_the_command_that_activates_it(session: _Session) -> None:
    session.stubber.add_response("list_cost_allocation_tags", _tags("Inactive"), REQUEST)
    (problem,) = run_precheck(blueprint_config.load(NAME), session).problems
    assert "mlstack:blueprint is Inactive" in problem
    assert "aws ce update-cost-allocation-tags-status" in problem


def test_unknown_tag_before_the_first_deploy_is_a_note(session: _Session) -> None:
    session.stubber.add_response("list_cost_allocation_tags", _tags(None), REQUEST)
    result = run_precheck(blueprint_config.load(NAME), session)
    assert result.problems == []
    (note,) = result.notes
    assert "not known to Billing yet" in note


def test_unreadable_tags_are_a_note(session: _Session) -> None:
    session.stubber.add_client_error("list_cost_allocation_tags", "AccessDeniedException", expected_params=REQUEST)
    result = run_precheck(blueprint_config.load(NAME), session)
    assert result.problems == []
    assert "AccessDeniedException" in result.notes[0]


def test_blueprint_without_budget_calls_nothing(session: _Session) -> None:
    with pytest.raises(InputError, match="nothing to check"):
        run_precheck(blueprint_config.load("eks-gpu-training"), session)
    assert session.regions == []


def test_cli_exits_1_on_an_inactive_tag(
    session: _Session, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    session.stubber.add_response("list_cost_allocation_tags", _tags("Inactive"), REQUEST)
    monkeypatch.setattr(boto3, "Session", lambda **_: session)
    assert cli.main(["precheck", NAME]) == 1
    assert "missing: cost allocation tag mlstack:blueprint is Inactive" in capsys.readouterr().out
