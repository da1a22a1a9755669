"""The `training:` section: every domain rule fires on a bad blueprint file with its own clear line.

Each test writes a small blueprint, breaks one thing and loads it through the loader, so the message format
(`file: field.path: problem; fix`) is checked too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.config.training import TrainingConfig
from mlstack.config.training_cluster import PLACEHOLDER_RESERVATION_ID
from mlstack.design.training import memory_warnings
from mlstack.errors import BlueprintError
from tests.synth import ROOT

BASE: dict[str, Any] = {
    "description": "training test blueprint",
    "env": {"region": "us-east-1"},
    "network": {"cidr": "10.0.0.0/16", "availability_zone_ids": ["use1-az4", "use1-az6"]},
    "training": {
        "node_groups": [
            {"name": "p5", "instance_type": "p5.48xlarge", "max_size": 2, "availability_zones": ["use1-az4"]}
        ],
        "fsx": {"storage_capacity_gib": 1200, "per_unit_storage_throughput": 250},
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
    (line,) = info.value.problems
    assert line.startswith(f"{tmp_path / 'bp.yaml'}: "), line
    return line


def _group(data: dict[str, Any], **changes: Any) -> dict[str, Any]:
    data["training"]["node_groups"][0].update(changes)
    return data


@pytest.fixture
def bp() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def test_the_base_blueprint_is_valid_and_cost_safe(tmp_path: Path, bp: dict[str, Any]) -> None:
    config = _load(tmp_path, bp)
    group = config.training.node_groups[0]
    assert group.desired_size == 0 and group.min_size == 0
    assert group.efa and group.uses_placement_group
    assert config.training.fsx.deployment_type == "PERSISTENT_2"
    assert config.training.cluster.endpoint_access == "private"


def test_unknown_instance_type_names_close_matches(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, instance_type="p5.96xlarge"))
    assert "training.node_groups.0.instance_type:" in line
    assert "unknown instance type 'p5.96xlarge'" in line and "p5.48xlarge" in line


def test_efa_on_an_instance_without_efa(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, instance_type="g6e.xlarge"))
    assert "training.node_groups.0: node group 'p5': g6e.xlarge does not support EFA; set efa: false" in line


def test_efa_with_more_than_one_az(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, availability_zones=["use1-az4", "use1-az6"]))
    assert "EFA needs one subnet in one AZ, got 2 (use1-az4, use1-az6)" in line


def test_efa_groups_in_different_azs(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["node_groups"].append(
        {"name": "p5b", "instance_type": "p5.48xlarge", "max_size": 2, "availability_zones": ["use1-az6"]}
    )
    line = _problem(tmp_path, bp)
    assert "EFA node groups span several AZs (use1-az4, use1-az6)" in line


def test_placement_group_with_a_reservation(tmp_path: Path, bp: dict[str, Any]) -> None:
    capacity = {"type": "capacity_block", "reservation_id": "cr-0123456789abcdef0"}
    line = _problem(tmp_path, _group(bp, placement_group=True, capacity=capacity))
    assert "a new placement group cannot be combined with a capacity_block" in line and "remove placement_group" in line


def test_reservation_without_an_id(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, capacity={"type": "capacity_reservation"}))
    assert "training.node_groups.0.capacity:" in line and "needs reservation_id (cr-...)" in line


def test_reservation_id_format(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, capacity={"type": "capacity_reservation", "reservation_id": "odcr-1"}))
    assert "'odcr-1' is not a capacity reservation ID" in line


def test_placeholder_reservation_id_is_rejected_once_the_group_has_nodes(tmp_path: Path, bp: dict[str, Any]) -> None:
    capacity = {"type": "capacity_reservation", "reservation_id": PLACEHOLDER_RESERVATION_ID}
    assert _load(tmp_path, _group(bp, capacity=capacity)).training.node_groups[0].desired_size == 0
    line = _problem(tmp_path, _group(bp, desired_size=2))
    assert (
        "training.node_groups.0: node group 'p5': capacity.reservation_id cr-0123456789abcdef0 is the blueprint's "
        "placeholder; put your own reservation's cr-... ID there" in line
    )
    capacity["reservation_id"] = "cr-0a1b2c3d4e5f67890"
    assert _load(tmp_path, _group(bp, capacity=capacity)).training.node_groups[0].desired_size == 2


def test_eks_p4d_first_job_needs_a_reservation(tmp_path: Path) -> None:
    """The README's first-job edit (2 nodes) on eks-p4d-training fails validation until the ID is replaced."""
    data = yaml.safe_load((BLUEPRINTS_DIR / "eks-p4d-training.yaml").read_text())
    data["training"]["node_groups"][0]["desired_size"] = 2
    data["training"]["job"]["nodes"] = 2
    assert "capacity.reservation_id cr-0123456789abcdef0 is the blueprint's placeholder" in _problem(tmp_path, data)
    section = (ROOT / "README.md").read_text().split("### First job on EKS", 1)[1].split("```", 1)[0]
    assert "`eks-p4d-training` also needs a reservation" in section and "capacity.reservation_id" in section


def test_spot_with_multi_node_efa(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, capacity={"type": "spot"}))
    assert "Spot capacity with multi-node EFA (max_size 2)" in line


def test_node_count_above_the_blueprint_max(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, max_size=6))
    assert "training: node_groups allow 6 nodes in all (sum of max_size) but max_nodes is 4" in line


def test_sizes_out_of_order(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, desired_size=3))
    assert "min_size <= desired_size <= max_size, got 0 <= 3 <= 2" in line


def test_zone_not_in_the_network(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, availability_zones=["use1-az2"]))
    assert "training.node_groups.0.availability_zones: 'use1-az2' is not one of the network's zones" in line


def test_fsx_in_a_different_az_from_the_efa_group(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["fsx"]["availability_zone"] = "use1-az6"
    line = _problem(tmp_path, bp)
    assert "training.fsx.availability_zone: 'use1-az6' differs from the EFA node group's AZ 'use1-az4'" in line


def test_fsx_capacity_steps(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["fsx"]["storage_capacity_gib"] = 3600
    line = _problem(tmp_path, bp)
    assert "training.fsx.storage_capacity_gib:" in line and "1200, 2400 or a multiple of 2400 GiB" in line


def test_fsx_throughput_values(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["fsx"]["per_unit_storage_throughput"] = 200
    line = _problem(tmp_path, bp)
    assert "must be one of 125, 250, 500, 1000 MB/s/TiB, got 200" in line


def test_admin_principal_must_be_an_iam_arn(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["cluster"] = {"admin_principal_arns": ["admin"]}
    line = _problem(tmp_path, bp)
    assert "training.cluster.admin_principal_arns:" in line and "is not an IAM role or user ARN" in line


def test_duplicate_node_group_names(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["node_groups"].append(dict(bp["training"]["node_groups"][0], max_size=1))
    bp["training"]["max_nodes"] = 8
    line = _problem(tmp_path, bp)
    assert "names must be unique, p5 repeated" in line


def test_unknown_key_in_the_training_section(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, efa_cards=4))
    assert "training.node_groups.0.efa_cards: unknown key" in line


def test_a_model_that_does_not_fit_is_a_warning_not_an_error(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["model"] = {"params": 70e9, "precision": "bf16", "zero_stage": 0}
    config = _load(tmp_path, bp)  # loads: the fit check never blocks a blueprint
    assert isinstance(config.training, TrainingConfig)
    (warning,) = memory_warnings(config.training)
    assert "node group 'p5': a 70B-parameter model (bf16, ZeRO stage 0)" in warning
    assert "more than the 68.0 GiB usable (85%) of the 80 GiB of a H100" in warning


def test_a_model_that_fits_gives_no_warning(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["model"] = {"params": 7e9, "zero_stage": 3}
    config = _load(tmp_path, bp)
    assert memory_warnings(config.training) == []


def test_job_nodes_above_the_node_group_max_size(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["job"] = {"nodes": 3}
    line = _problem(tmp_path, bp)
    assert "training: job.nodes 3 exceeds node group 'p5' max_size 2; lower job.nodes or raise max_size" in line


def test_model_size_is_bounded_by_the_memory_model(tmp_path: Path, bp: dict[str, Any]) -> None:
    # Above the memory model's limit the fit check would raise at synth and plan: reject it at load.
    bp["training"]["model"] = {"params": 1e16}
    line = _problem(tmp_path, bp)
    assert "training.model.params:" in line and "less than or equal to 100000000000000" in line


def test_scratch_2_needs_no_throughput(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["fsx"] = {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400}
    fsx = _load(tmp_path, bp).training.fsx
    assert fsx.per_unit_storage_throughput is None and fsx.throughput_mbps == 2.4 * 200
    bp["training"]["fsx"]["per_unit_storage_throughput"] = 250
    assert "per_unit_storage_throughput is not used by SCRATCH_2" in _problem(tmp_path, bp)


def test_backups_with_a_data_repository(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["fsx"].update(automatic_backup_retention_days=7, data_repository={"bucket": "my-data"})
    line = _problem(tmp_path, bp)
    assert "training.fsx: FSx for Lustre does not back up file systems linked to an S3 data repository" in line


def test_node_group_names_that_give_the_same_construct_id(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["node_groups"] = [
        {"name": "x1", "instance_type": "m7i.xlarge", "efa": False, "max_size": 1},
        {"name": "x-1", "instance_type": "m7i.xlarge", "efa": False, "max_size": 1},
    ]
    line = _problem(tmp_path, bp)
    assert "names 'x1' and 'x-1' differ only by hyphens and give the same construct ID 'X1'; rename one" in line


def test_system_nodes_must_not_be_accelerated(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["training"]["system_node_group"] = {"instance_type": "g5.xlarge"}
    line = _problem(tmp_path, bp)
    assert "training.system_node_group.instance_type: g5.xlarge is an accelerated instance" in line


def test_model_fit_counts_the_devices_of_the_job(tmp_path: Path, bp: dict[str, Any]) -> None:
    # 50B, ZeRO-3, Llama-3.1-70B shape (80 layers, hidden 8192), seq 4096, micro-batch 1, per device:
    #   states 16 B x 50e9 / devices; activations 80 x 2sbh + 34sbh = 6.06 GiB; gathered weights 4 B x 50e9 / 80.
    # Over 16 H100s (2 nodes): 46.6 + 6.1 + 2.3 = 54.9 GiB fits in 85% of 80 GiB; a 1-node job (8 devices) does not.
    bp["training"]["model"] = {"params": 50e9, "zero_stage": 3}
    assert memory_warnings(_load(tmp_path, bp).training) == []
    bp["training"]["job"] = {"nodes": 1}
    (warning,) = memory_warnings(_load(tmp_path, bp).training)
    assert "needs 101.5 GiB per accelerator across 8 devices (model states 93.1, activations at sequence length" in (
        warning
    )


def test_fit_counts_activations_and_headroom(tmp_path: Path, bp: dict[str, Any]) -> None:
    # Fixed defect: the plan compared model states alone with all of device memory, so 70B ZeRO-3 on 16 H100s
    # (65.2 GiB of states) "fitted" while `mlstack advise train` (states + 6.1 GiB activations + 3.3 GiB gathered
    # weights = 74.5 GiB > 68 GiB usable) said pure data parallelism does not.
    bp["training"]["model"] = {"params": 70e9, "zero_stage": 3}
    (warning,) = memory_warnings(_load(tmp_path, bp).training)
    assert "needs 74.5 GiB per accelerator across 16 devices (model states 65.2" in warning


def test_training_needs_a_nat_gateway(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["network"]["nat_gateways"] = 0
    line = _problem(tmp_path, bp)
    assert "network.nat_gateways: 0 makes the private subnets isolated, but the training cluster's Helm charts" in line


def test_node_group_cannot_be_named_system(tmp_path: Path, bp: dict[str, Any]) -> None:
    line = _problem(tmp_path, _group(bp, name="system"))
    assert "training.node_groups.0.name: 'system' is the system node group's label value" in line


def test_eks_needs_two_zones(tmp_path: Path, bp: dict[str, Any]) -> None:
    bp["network"]["availability_zone_ids"] = ["use1-az4"]
    line = _problem(tmp_path, bp)
    assert "network: the EKS control plane needs subnets in at least two AZs, the network has 1 (use1-az4)" in line
