"""`training.engine`: EKS stays the default; each HyperPod (Slurm) and Batch rule fires with its own line; the EFA
count every engine uses comes from one function."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog import efa_interface_count, efa_layout
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.errors import BlueprintError

NETWORK = {"cidr": "10.0.0.0/16", "availability_zone_ids": ["use1-az4", "use1-az6"]}
HYPERPOD: dict[str, Any] = {
    "description": "hyperpod test blueprint",
    "env": {"region": "us-east-1"},
    "network": NETWORK,
    "training": {
        "engine": "hyperpod-slurm",
        "node_groups": [
            {
                "name": "p5",
                "instance_type": "ml.p5.48xlarge",
                "desired_size": 2,
                "max_size": 2,
                "availability_zones": ["use1-az4"],
            }
        ],
        "fsx": {"storage_capacity_gib": 1200, "per_unit_storage_throughput": 250},
        "max_nodes": 4,
    },
}
BATCH: dict[str, Any] = {
    "description": "batch test blueprint",
    "env": {"region": "us-east-1"},
    "network": NETWORK,
    "training": {
        "engine": "batch",
        "node_groups": [
            {"name": "p5", "instance_type": "p5.48xlarge", "max_size": 2, "availability_zones": ["use1-az4"]}
        ],
        "job": {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"},
        "max_nodes": 4,
    },
}


def _load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def _problem(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, data)
    # Every problem is reported (training_rules.py); the engine rule under test is the first.
    return info.value.problems[0]


@pytest.fixture
def hp() -> dict[str, Any]:
    return copy.deepcopy(HYPERPOD)


@pytest.fixture
def bt() -> dict[str, Any]:
    return copy.deepcopy(BATCH)


@pytest.mark.parametrize(
    ("instance_type", "count"),
    [
        ("p5.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("p4d.24xlarge", 4),
        ("trn1.32xlarge", 8),
        ("p6-b300.48xlarge", 16),
        ("inf2.48xlarge", 0),
    ],
)
def test_efa_interface_count_is_the_catalog_layout(instance_type: str, count: int) -> None:
    assert efa_interface_count(instance_type) == count
    if count:
        assert sum(n.is_efa for n in efa_layout(instance_type)) == count


def test_engine_defaults_to_eks_for_every_shipped_eks_blueprint() -> None:
    for path in sorted(BLUEPRINTS_DIR.glob("eks-*-training.yaml")):  # eks-llm-serving is inference on EKS
        training = load(path).training
        assert training is not None and training.engine == "eks", path.name
        assert "engine" not in yaml.safe_load(path.read_text())["training"], path.name


def test_valid_hyperpod_and_batch_blueprints_load(tmp_path: Path, hp: dict[str, Any], bt: dict[str, Any]) -> None:
    training = _load(tmp_path, hp).training
    assert training.engine == "hyperpod-slurm" and training.node_groups[0].instance_type == "p5.48xlarge"
    assert _load(tmp_path, bt).training.engine == "batch"


@pytest.mark.parametrize("instance_type", ["inf2.48xlarge", "m7i.48xlarge"])
def test_hyperpod_workers_must_be_gpu_or_trainium(tmp_path: Path, hp: dict[str, Any], instance_type: str) -> None:
    hp["training"]["node_groups"][0].update(instance_type=instance_type, efa=False)
    line = _problem(tmp_path, hp)
    assert "training.node_groups.0.instance_type: HyperPod workers must be GPU or Trainium" in line
    assert instance_type in line


def test_hyperpod_controller_type_must_be_offered(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["hyperpod"] = {"controller": {"instance_type": "c7i.xlarge"}}
    assert "ml.c7i.xlarge is not a HyperPod cluster instance type" in _problem(tmp_path, hp)


def test_hyperpod_takes_no_ec2_capacity(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["node_groups"][0]["capacity"] = {"type": "capacity_block", "reservation_id": "cr-0a1b2c3d4e5f67890"}
    assert "HyperPod takes no EC2 capacity_block" in _problem(tmp_path, hp)


def test_hyperpod_has_no_placement_group(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["node_groups"][0]["placement_group"] = True
    assert "HyperPod places instances itself" in _problem(tmp_path, hp)


def test_hyperpod_count_out_of_range(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["hyperpod"] = {"controller": {"count": 2}}
    assert "training.hyperpod.controller.count: Slurm has one controller" in _problem(tmp_path, hp)
    hp["training"]["hyperpod"] = {"controller": {"count": 0}}
    assert "greater than or equal to 1" in _problem(tmp_path, hp)


def test_hyperpod_missing_lifecycle_script(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["hyperpod"] = {"on_create": "setup.sh"}
    line = _problem(tmp_path, hp)
    assert "training.hyperpod.on_create: 'setup.sh' is not in the lifecycle scripts" in line
    assert "on_create.sh" in line


def test_hyperpod_own_lifecycle_directory(tmp_path: Path, hp: dict[str, Any]) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    hp["training"]["hyperpod"] = {"lifecycle_scripts": str(scripts)}
    assert "is not in the lifecycle scripts" in _problem(tmp_path, hp)
    (scripts / "on_create.sh").write_text("#!/bin/bash\n")
    assert _load(tmp_path, hp).training.hyperpod.scripts_dir == scripts


def test_hyperpod_groups_in_mixed_azs(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["node_groups"].append(
        {
            "name": "g6e",
            "instance_type": "g6e.12xlarge",
            "efa": False,
            "desired_size": 1,
            "max_size": 1,
            "availability_zones": ["use1-az6"],
        }
    )
    line = _problem(tmp_path, hp)
    assert "engine hyperpod-slurm runs every group in one subnet, got AZs use1-az4, use1-az6" in line


def test_hyperpod_reserved_group_name(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["node_groups"][0]["name"] = "controller"
    assert "'controller' is the HyperPod controller group's name" in _problem(tmp_path, hp)


def test_hyperpod_training_plan_arn_form(tmp_path: Path, hp: dict[str, Any]) -> None:
    hp["training"]["hyperpod"] = {"training_plan_arn": "cr-0123456789abcdef0"}
    assert "is not a SageMaker training plan ARN" in _problem(tmp_path, hp)


def test_keys_of_another_engine_are_rejected(tmp_path: Path, hp: dict[str, Any], bt: dict[str, Any]) -> None:
    hp["training"]["cluster"] = {"kubernetes_version": "1.35"}
    assert "training.cluster is used by engine eks or hyperpod-eks, not hyperpod-slurm" in _problem(tmp_path, hp)
    bt["training"]["hyperpod"] = {}
    assert "training.hyperpod is used by engine hyperpod-slurm or hyperpod-eks, not batch" in _problem(tmp_path, bt)
    hp = copy.deepcopy(HYPERPOD)
    hp["training"]["batch"] = {}
    assert "training.batch is used by engine batch, not hyperpod-slurm" in _problem(tmp_path, hp)


def test_batch_rejects_spot(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["node_groups"][0].update(capacity={"type": "spot"}, efa=False)
    assert "multi-node parallel jobs do not run on Spot" in _problem(tmp_path, bt)


def test_batch_rejects_spot_with_efa_through_the_shared_rule(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["node_groups"][0]["capacity"] = {"type": "spot"}
    assert "Spot capacity with multi-node EFA" in _problem(tmp_path, bt)


def test_batch_placement_group_with_capacity_block(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["node_groups"][0].update(
        capacity={"type": "capacity_block", "reservation_id": "cr-0123456789abcdef0"}, placement_group=True
    )
    assert "placement group cannot be combined with a capacity_block" in _problem(tmp_path, bt)


def test_batch_takes_one_group_of_an_nvidia_type(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["node_groups"][0]["instance_type"] = "trn1.32xlarge"
    assert "engine batch runs on the ECS GPU AMI (NVIDIA types), got trn1.32xlarge" in _problem(tmp_path, bt)
    bt = copy.deepcopy(BATCH)
    bt["training"]["node_groups"].append(
        {"name": "p4d", "instance_type": "p4d.24xlarge", "max_size": 1, "availability_zones": ["use1-az4"]}
    )
    assert "engine batch runs one multi-node job definition on one instance type, got 2" in _problem(tmp_path, bt)


def test_batch_without_an_image_builds_the_training_image(tmp_path: Path, bt: dict[str, Any]) -> None:
    from mlstack.config.training import SHIPPED_SCRIPT
    from mlstack.k8s.image import builds_image

    del bt["training"]["job"]
    config = _load(tmp_path, bt)
    assert builds_image(config) and config.training.job.script == SHIPPED_SCRIPT


def test_batch_stock_image_with_the_shipped_script_is_the_eks_error(tmp_path: Path, bt: dict[str, Any]) -> None:
    dlc = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2"
    bt["training"]["job"] = {"image": dlc}
    line = _problem(tmp_path, bt)
    assert f"training.job.image: {dlc!r} is a stock image without the shipped script" in line
    assert "\n" not in line.strip()


def test_batch_update_job_timeout_is_bounded_by_the_batch_api(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["batch"] = {"update_job_timeout_minutes": 7201}
    assert "update_job_timeout_minutes" in _problem(tmp_path, bt)
    bt["training"]["batch"] = {"update_job_timeout_minutes": 360}
    assert _load(tmp_path, bt).training.batch.update_job_timeout_minutes == 360


def test_batch_mixed_azs_in_an_efa_group(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["node_groups"][0]["availability_zones"] = ["use1-az4", "use1-az6"]
    assert "EFA needs one subnet in one AZ, got 2" in _problem(tmp_path, bt)


def test_unknown_engine(tmp_path: Path, bt: dict[str, Any]) -> None:
    bt["training"]["engine"] = "slurm"
    assert "training.engine" in _problem(tmp_path, bt)


def test_catalog_hyperpod_flag_matches_the_api_enum() -> None:
    # botocore's sagemaker model lists every ClusterInstanceType; the catalog's flag drives the HyperPod rules.
    import botocore.session

    from mlstack.catalog import all_instances

    model = botocore.session.get_session().get_service_model("sagemaker")
    offered = set(model.shape_for("ClusterInstanceType").enum)
    assert {f"ml.{i.name}" for i in all_instances() if i.sagemaker_hyperpod} == {
        f"ml.{i.name}" for i in all_instances() if f"ml.{i.name}" in offered
    }


def test_three_training_problems_are_reported_in_one_run(tmp_path: Path, hp: dict[str, Any]) -> None:
    # Engine and job rules used to stop at the first problem (TrainingConfig raised problems[0]).
    hp["training"]["node_groups"][0].update(instance_type="inf2.48xlarge", efa=False)  # not a HyperPod worker
    hp["training"]["batch"] = {}  # a key of engine batch
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, hp)
    problems = info.value.problems
    assert len(problems) == 3, problems
    assert any("training.batch is used by engine batch" in p for p in problems)
    assert any("HyperPod workers must be GPU or Trainium" in p for p in problems)
    assert any("training.job.script: the shipped reference script" in p for p in problems)
