"""`capacity_manager: karpenter`, `karpenter:` and `teams:`: every rule fires on a bad blueprint with its own line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.errors import BlueprintError
from tests.synth import ROOT

SHIPPED = ROOT / "blueprints" / "eks-karpenter-training.yaml"


def _base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    return copy.deepcopy(data)


def _load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def _error(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(BlueprintError) as err:
        _load(tmp_path, data)
    return str(err.value)


def test_shipped_blueprint_loads(tmp_path: Path) -> None:
    bp = _load(tmp_path, _base())
    assert bp.training.capacity_manager == "karpenter"
    assert [t.name for t in bp.training.teams] == ["research", "product"]


def _pool(data: dict[str, Any], **override: Any) -> dict[str, Any]:
    data["training"]["karpenter"]["pools"] = [{"node_group": "p5", **override}]
    return data


def test_efa_pool_across_azs(tmp_path: Path) -> None:
    message = _error(tmp_path, _pool(_base(), availability_zones=["use1-az4", "use1-az6"]))
    assert "training.karpenter.pools[p5].availability_zones: an EFA pool across 2 AZs" in message
    assert "list one zone" in message


def test_efa_and_non_efa_types_in_one_pool(tmp_path: Path) -> None:
    message = _error(tmp_path, _pool(_base(), extra_instance_types=["g5.2xlarge"]))
    assert "training.karpenter.pools[p5].extra_instance_types: g5.2xlarge without EFA in the EFA pool" in message


def test_capacity_block_pool_without_reserved(tmp_path: Path) -> None:
    data = _base()
    data["training"]["node_groups"][0]["capacity"] = {
        "type": "capacity_block",
        "reservation_id": "cr-0aa11bb22cc33dd44",
    }
    message = _error(tmp_path, _pool(data, capacity_types=["on-demand"]))
    assert "capacity_types: ['on-demand'] for a Capacity Block pool" in message
    assert "use [reserved]" in message


def test_spot_in_multi_node_efa_pool(tmp_path: Path) -> None:
    message = _error(tmp_path, _pool(_base(), capacity_types=["on-demand", "spot"]))
    assert "spot in a multi-node EFA pool (max_size 4)" in message


def test_reserved_without_a_reservation(tmp_path: Path) -> None:
    message = _error(tmp_path, _pool(_base(), capacity_types=["reserved"]))
    assert "reserved needs the group's capacity.type capacity_reservation or capacity_block" in message


def test_team_quota_above_what_the_pool_provides(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][0]["quotas"][0]["accelerators"] = 40
    message = _error(tmp_path, data)
    assert (
        "training.teams[research].quotas[p5].accelerators: 40 is more than node group 'p5' can provide (32" in message
    )


def test_team_quotas_together_above_the_pool(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][1]["quotas"][0]["accelerators"] = 24
    message = _error(tmp_path, data)
    assert "nominal quotas on node group 'p5' add up to 40 accelerators but it can provide 32" in message


def test_unknown_team_in_a_job(tmp_path: Path) -> None:
    data = _base()
    data["training"]["job"]["team"] = "platform"
    assert "training.job.team: 'platform' is not a team; use one of research, product" in _error(tmp_path, data)


def test_job_team_without_teams(tmp_path: Path) -> None:
    data = _base()
    del data["training"]["teams"]
    assert "training.job.team: 'research' but the blueprint has no teams" in _error(tmp_path, data)


def test_quota_on_unknown_group(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][0]["quotas"][0]["node_group"] = "p4"
    assert "training.teams[research].quotas: 'p4' is not a node group; use one of p5" in _error(tmp_path, data)


def test_grace_period_shorter_than_checkpoint_interval(tmp_path: Path) -> None:
    data = _base()
    data["training"]["karpenter"]["termination_grace_period_minutes"] = 20
    message = _error(tmp_path, data)
    assert "termination_grace_period_minutes 20 is shorter than checkpoint_interval_minutes 30" in message


def test_consolidation_delay_at_least_ten_minutes(tmp_path: Path) -> None:
    data = _base()
    data["training"]["karpenter"]["consolidate_after_minutes"] = 5
    assert "consolidate_after_minutes" in _error(tmp_path, data)


def test_karpenter_pool_starts_empty(tmp_path: Path) -> None:
    data = _base()
    data["training"]["node_groups"][0]["desired_size"] = 2
    assert "a Karpenter pool starts empty" in _error(tmp_path, data)


def test_karpenter_only_on_engines_with_eks(tmp_path: Path) -> None:
    data = _base()
    data["training"]["engine"] = "batch"
    data["training"].pop("teams")
    data["training"]["job"].pop("team")
    assert "capacity_manager: karpenter runs on engines eks and hyperpod-eks, not batch" in _error(tmp_path, data)


def test_karpenter_settings_need_karpenter(tmp_path: Path) -> None:
    data = _base()
    data["training"]["capacity_manager"] = "node_groups"
    assert "training.karpenter: set only with capacity_manager: karpenter" in _error(tmp_path, data)


def test_pool_for_unknown_group(tmp_path: Path) -> None:
    data = _base()
    data["training"]["karpenter"]["pools"] = [{"node_group": "p6"}]
    assert "training.karpenter.pools: 'p6' is not a node group" in _error(tmp_path, data)


def test_every_error_is_one_line(tmp_path: Path) -> None:
    data = _pool(_base(), availability_zones=["use1-az4", "use1-az6"])
    line = next(line for line in _error(tmp_path, data).splitlines() if "EFA pool across" in line)
    assert "; " in line  # problem; fix


def _second_group(data: dict[str, Any]) -> dict[str, Any]:
    data["training"]["node_groups"].append(
        {"name": "g6", "instance_type": "g6.12xlarge", "desired_size": 0, "min_size": 0, "max_size": 2, "efa": False}
    )
    data["training"]["max_nodes"] = 6
    return data


def test_job_team_quota_is_the_job_teams(tmp_path: Path) -> None:
    """The rule reads the job's team, not the last team listed: research (the job's) has a p5 quota, product only
    a g6 one, and the blueprint is fine."""
    data = _second_group(_base())
    data["training"]["teams"][1]["quotas"] = [{"node_group": "g6", "accelerators": 8}]
    bp = _load(tmp_path, data)
    assert bp.training.job.team == "research"


def test_job_team_without_a_quota_on_the_job_group(tmp_path: Path) -> None:
    data = _second_group(_base())
    data["training"]["teams"][0]["quotas"] = [{"node_group": "g6", "accelerators": 8}]
    message = _error(tmp_path, data)
    assert "training.job: team 'research' has no quota on node group 'p5', so its queue never admits the job" in message
