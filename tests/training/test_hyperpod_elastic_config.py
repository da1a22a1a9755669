"""`teams:` and `capacity_manager: karpenter` on engine hyperpod-eks (task governance, HyperPod autoscaling): every
rule fires on a bad blueprint with its own line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.design.hyperpod_governance import autoscaling, governance
from mlstack.errors import BlueprintError
from tests.synth import ROOT

SHIPPED = ROOT / "blueprints" / "hyperpod-eks-teams.yaml"


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


def test_shipped_blueprint_designs(tmp_path: Path) -> None:
    training = _load(tmp_path, _base()).training
    design = governance(training)
    assert design is not None
    research = design.team("research")
    assert (research.namespace, research.local_queue, research.priority_class) == (
        "hyperpod-ns-research",
        "hyperpod-ns-research-localqueue",
        "training-priority",
    )
    assert research.borrow_percent == 50
    assert [(a.instance_type, a.borrow, a.borrow_vcpu, a.borrow_memory_gib) for a in research.absolute_borrow] == [
        ("ml.p5.48xlarge", 8, 172, 1638)
    ]
    assert dict(design.priority_classes) == {"inference": 100, "training": 50, "experiments": 10}
    scaling = autoscaling(training)
    assert scaling is not None and scaling.max_nodes == (("p5", "ml.p5.48xlarge", 4),)


def test_team_quota_above_the_instance_group(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][0]["quotas"][0]["accelerators"] = 40
    message = _error(tmp_path, data)
    assert "training.teams[research].quotas[p5].accelerators: 40 is more than node group 'p5' can provide" in message
    assert "(32 = max_size 4 x 8)" in message


def test_team_quota_above_a_fixed_instance_group(tmp_path: Path) -> None:
    """Without autoscaling an instance group holds exactly its InstanceCount (desired_size), not max_size."""
    data = _base()
    data["training"]["capacity_manager"] = "node_groups"
    data["training"]["node_groups"][0].update(desired_size=1, min_size=0, max_size=4)
    message = _error(tmp_path, data)
    assert "(8 = desired_size (the instance count) 1 x 8); lower it or raise desired_size" in message


def test_quotas_sum_above_the_cluster(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][1]["quotas"][0]["accelerators"] = 24
    message = _error(tmp_path, data)
    assert "training.teams: quotas on ml.p5.48xlarge add up to 40 accelerators but the cluster's" in message
    assert "provide 32" in message


def test_unknown_team_in_a_job(tmp_path: Path) -> None:
    data = _base()
    data["training"]["job"]["team"] = "ops"
    assert "training.job.team: 'ops' is not a team; use one of research, product" in _error(tmp_path, data)


def test_job_outside_its_team_namespace(tmp_path: Path) -> None:
    data = _base()
    data["training"]["job"]["namespace"] = "hyperpod-training"
    message = _error(tmp_path, data)
    assert "training.job.namespace: 'hyperpod-training' but task governance queues team 'research'" in message
    assert "set job.namespace: hyperpod-ns-research" in message


def test_fractional_weight(tmp_path: Path) -> None:
    data = _base()
    data["training"]["teams"][0]["weight"] = 1.5
    assert "training.teams[research].weight: 1.5; HyperPod's fair-share weight is a whole number" in _error(
        tmp_path, data
    )


def test_autoscaling_without_deep_health_checks(tmp_path: Path) -> None:
    data = _base()
    data["training"]["hyperpod"]["deep_health_checks"] = True
    assert "training.hyperpod.deep_health_checks: true with capacity_manager karpenter" in _error(tmp_path, data)


def test_autoscaling_on_demand_only(tmp_path: Path) -> None:
    data = _base()
    data["training"]["hyperpod"]["training_plan_arn"] = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p"
    assert "training.hyperpod.training_plan_arn: set with capacity_manager karpenter" in _error(tmp_path, data)


def test_autoscaling_needs_automatic_recovery(tmp_path: Path) -> None:
    data = _base()
    data["training"]["hyperpod"]["node_recovery"] = "None"
    assert "training.hyperpod.node_recovery: 'None' with capacity_manager karpenter" in _error(tmp_path, data)


def test_autoscaled_group_starts_at_zero(tmp_path: Path) -> None:
    data = _base()
    data["training"]["node_groups"][0]["desired_size"] = 2
    assert "HyperPod autoscaling starts each instance group at 0 nodes" in _error(tmp_path, data)


def test_no_pools_on_hyperpod(tmp_path: Path) -> None:
    data = _base()
    data["training"]["karpenter"] = {"pools": [{"node_group": "p5", "extra_instance_types": ["p5en.48xlarge"]}]}
    assert "training.karpenter.pools: HyperPod's managed Karpenter launches the instance groups" in _error(
        tmp_path, data
    )


def test_teams_still_rejected_on_slurm(tmp_path: Path) -> None:
    data = _base()
    data["training"]["engine"] = "hyperpod-slurm"
    data["training"]["capacity_manager"] = "node_groups"
    assert "training.teams: team queues run on engines eks (Kueue) and hyperpod-eks" in _error(tmp_path, data)
