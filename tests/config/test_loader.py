"""Blueprint files: every shipped one loads; every kind of bad file gives one clear line per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlstack.config import BLUEPRINTS_DIR, DEFAULT_BLUEPRINT, load, resolve
from mlstack.config.blueprint import az_id_prefix
from mlstack.errors import BlueprintError

GOOD = """\
description: test blueprint
env: {region: us-east-1}
network:
  cidr: 10.0.0.0/16
"""


def _write(tmp_path: Path, text: str, name: str = "bp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(tmp_path: Path, text: str) -> tuple[str, ...]:
    with pytest.raises(BlueprintError) as info:
        load(_write(tmp_path, text))
    return info.value.problems


@pytest.mark.parametrize("path", sorted(BLUEPRINTS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_blueprint_loads(path: Path) -> None:
    assert load(path).name == path.stem


def test_default_blueprint_exists() -> None:
    assert resolve(DEFAULT_BLUEPRINT).is_file()


def test_name_defaults_to_the_file_name(tmp_path: Path) -> None:
    assert load(_write(tmp_path, GOOD, "team-a.yaml")).name == "team-a"


def test_unknown_key_names_file_path_and_fix(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  nat_gatways: 2\n")
    assert line.startswith(f"{tmp_path / 'bp.yaml'}: network.nat_gatways: unknown key;")
    assert "fix its spelling" in line


def test_wrong_type_shows_value_and_fix(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  nat_gateways: many\n")
    assert "network.nat_gateways:" in line and "'many'" in line and "whole number" in line


def test_invalid_cidr(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD.replace("10.0.0.0/16", "10.0.0.0/33"))
    assert "network.cidr:" in line and "'10.0.0.0/33'" in line and "10.0.0.0/16" in line


@pytest.mark.parametrize(
    ("cidr", "expected"), [("10.0.0.0/12", "/16 to /24"), ("8.8.0.0/16", "RFC 1918"), ("10.0.0.0/25", "/16 to /24")]
)
def test_cidr_size_and_range(tmp_path: Path, cidr: str, expected: str) -> None:
    (line,) = _problems(tmp_path, GOOD.replace("10.0.0.0/16", cidr))
    assert expected in line


def test_several_problems_give_one_line_each(tmp_path: Path) -> None:
    text = GOOD + "  max_azs: 9\n  flow_logs: {retention_days: 12}\n  interface_endpoints: [ecr.api, s4]\n"
    problems = _problems(tmp_path, text)
    assert len(problems) == 3
    assert any("network.max_azs" in p for p in problems)
    assert any("retention_days" in p and "365" in p for p in problems)
    assert any("'s4'" in p for p in problems)


def test_missing_file_lists_the_shipped_names() -> None:
    with pytest.raises(BlueprintError, match=r"no such blueprint file.*eks-gpu-training"):
        load("no-such-blueprint")


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "description: x\nnetwork: [\n")
    assert f"{tmp_path / 'bp.yaml'}:3:1: YAML syntax error" in line


def test_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "- a\n- b\n")
    assert "must be a YAML mapping" in line


def test_empty_file(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "")
    assert "an empty file" in line


def test_az_names_must_be_in_the_region(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  availability_zones: [us-west-2a]\n")
    assert "'us-west-2a' is not in region 'us-east-1'" in line


def test_az_ids_must_be_in_the_region(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  availability_zone_ids: [usw2-az1]\n")
    assert "use1-az1" in line


def test_az_names_and_ids_are_exclusive(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  availability_zones: [us-east-1a]\n  availability_zone_ids: [use1-az1]\n")
    assert "not both" in line


def test_more_nat_gateways_than_azs(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  availability_zone_ids: [use1-az1]\n  nat_gateways: 2\n")
    assert "nat_gateways (2) exceeds the number of AZs (1)" in line


def test_subnets_must_fit_the_cidr(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD.replace("10.0.0.0/16", "10.0.0.0/20") + "  private_subnet_mask: 18\n")
    assert "do not fit in 10.0.0.0/20" in line


def test_duplicate_zone(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD + "  availability_zone_ids: [use1-az1, use1-az1]\n")
    assert "more than once" in line


def test_multi_line_description(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, GOOD.replace("description: test blueprint", "description: |\n  a\n  b"))
    assert "one line" in line


@pytest.mark.parametrize(
    ("region", "prefix"),
    [("us-east-1", "use1"), ("ap-southeast-2", "apse2"), ("eu-central-1", "euc1"), ("us-gov-west-1", "usgw1")],
)
def test_az_id_prefix(region: str, prefix: str) -> None:
    assert az_id_prefix(region) == prefix


def test_every_cross_section_problem_is_reported_in_one_run(tmp_path: Path) -> None:
    text = (BLUEPRINTS_DIR / "eks-g6e-training.yaml").read_text()
    text = text.replace("availability_zone_ids: [use1-az4, use1-az6]", "availability_zone_ids: [use1-az4, usw2-az1]")
    text = text.replace("nat_gateways: 1", "nat_gateways: 0")
    text = text.replace("    - name: g6e\n", "    - name: g6e\n      availability_zones: [use1-az2]\n")
    problems = _problems(tmp_path, text)
    where = f"{tmp_path / 'bp.yaml'}: "
    assert all(line.startswith(where) and "\n" not in line for line in problems), problems
    assert len(problems) == 3, problems
    assert "network.availability_zone_ids: 'usw2-az1' is not in region 'us-east-1'" in problems[0]
    assert "network.nat_gateways: 0 makes the private subnets isolated" in problems[1]
    assert "training.node_groups.0.availability_zones: 'use1-az2' is not one of the network's zones" in problems[2]
