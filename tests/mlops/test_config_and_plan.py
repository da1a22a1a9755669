"""The `mlops:` section (one line per bad value, through the loader) and `mlstack plan` for the MLOps blueprints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.errors import BlueprintError
from mlstack.plan import build_plan, render

IMAGE = {"source": "dlc", "account": "683313688378", "repository": "sagemaker-scikit-learn", "tag": "1.2-1-cpu-py3"}
MONITOR = {
    "source": "dlc",
    "account": "156813124566",
    "repository": "sagemaker-model-monitor-analyzer",
    "tag": "latest",
}


def _load(tmp_path: Path, training: dict[str, Any] | None = None, **mlops: Any) -> Any:
    section: dict[str, Any] = {
        "images": {"training": IMAGE, "processing": IMAGE},
        "monitoring": {"image": MONITOR},
        "pipeline": {"training": training or {}},
    }
    section.update(mlops)
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump({"name": "mlops-test", "description": "test", "mlops": section}))
    return load(path)


def _problem(tmp_path: Path, training: dict[str, Any] | None = None, **mlops: Any) -> str:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, training, **mlops)
    (problem,) = info.value.problems
    assert "\n" not in problem
    return problem.split(": ", 1)[1]  # drop the file path


def test_minimal_section_has_cheap_secure_defaults(tmp_path: Path) -> None:
    config = _load(tmp_path)
    assert config.stack_ids == ["NetworkStack", "MlopsStack"]
    mlops = config.mlops
    assert mlops.pipeline.training.instance_type == "ml.m7i.xlarge"
    assert mlops.pipeline.training.spot is False
    assert mlops.serving.instance_type == "ml.m7i.large"
    assert mlops.serving.volume_key is True
    assert mlops.studio is None


@pytest.mark.parametrize(
    ("training", "message"),
    [
        (
            {"instance_type": "ml.inf2.xlarge"},
            "mlops.pipeline.training.instance_type: training instance 'ml.inf2.xlarge': SageMaker does not offer it "
            "for training jobs; pick another type (got 'ml.inf2.xlarge')",
        ),
        (
            {"instance_type": "ml.g5.2xlarge", "instance_count": 2, "distribution": "torchrun"},
            "mlops.pipeline.training: instance_type: ml.g5.2xlarge has no EFA; torchrun on 2 instances needs "
            "ml.p4d.24xlarge, ml.p5.48xlarge or ml.trn1.32xlarge (or instance_count: 1)",
        ),
        (
            {"instance_type": "ml.p4d.24xlarge", "instance_count": 2, "spot": True, "max_wait_hours": 2},
            "mlops.pipeline.training: spot: managed Spot on several instances needs checkpoints: true (else restart "
            "from 0)",
        ),
        (
            {"spot": True, "max_runtime_hours": 2, "max_wait_hours": 1},
            "mlops.pipeline.training: max_wait_hours: with spot it must be >= max_runtime_hours (2.0) (got 1.0)",
        ),
        ({"max_wait_hours": 1}, "mlops.pipeline.training: max_wait_hours: only for spot: true; remove it"),
        (
            {"instance_type": "ml.g5.2xlarge", "volume_size_gb": 200},
            "mlops.pipeline.training: volume_size_gb: ml.g5.2xlarge trains on its local NVMe (1 x 450 GB), "
            "SageMaker takes no volume size there; remove volume_size_gb",
        ),
    ],
)
def test_bad_training_step_is_one_line(tmp_path: Path, training: dict[str, Any], message: str) -> None:
    assert _problem(tmp_path, training) == message


def test_processing_type_must_be_offered_for_processing(tmp_path: Path) -> None:
    problem = _problem(tmp_path, pipeline={"processing_instance_type": "ml.p4d.24xlarge"})
    assert problem.startswith(
        "mlops.pipeline.processing_instance_type: processing instance 'ml.p4d.24xlarge': SageMaker does not offer it "
        "for processing jobs"
    )


def test_studio_users_that_collide_without_dashes(tmp_path: Path) -> None:
    problem = _problem(tmp_path, studio={"users": ["data-sci", "datasci"]})
    assert problem.startswith("mlops.studio.users: 'datasci': another user has the same name without '-'")


def test_plan_lists_steps_instance_hours_unknown_sagemaker_cost_and_the_endpoint() -> None:
    plan = build_plan(load("mlops-efa-training"))
    assert plan.stacks == ["NetworkStack", "MlopsStack"]
    (section,) = [rows for title, rows in plan.details["sections"] if title == "MLOps pipeline run"]
    assert section[1] == "Train: 2 x ml.p4d.24xlarge, torchrun, EFA, managed Spot, checkpoints to S3, ~8 instance-hours"
    assert any(r.startswith("cost per run: unknown") for r in section)
    assert plan.details["mlops"]["cost_per_run"] is None
    assert plan.details["mlops"]["endpoint"] == "mlops-efa-training-serving"
    (endpoint_cost,) = [c for c in plan.costs if c.item.startswith("endpoint ")]
    # the dated SageMaker hosting rate of ml.g5.2xlarge, never the EC2 g5.2xlarge rate ($1.212/h)
    assert (endpoint_cost.unit_per_hour, endpoint_cost.price_date) == (1.515, "2025-01-26")
    pipeline = build_plan(load("mlops-pipeline"))
    (m7i,) = [c for c in pipeline.costs if c.item.startswith("endpoint ")]
    assert m7i.unit_per_hour is None and "no dated SageMaker ml.* rate" in m7i.source  # none invented
    quotas = {q.name: q.needed for q in plan.quotas if q.service == "sagemaker"}
    assert quotas["ml.p4d.24xlarge for spot training job usage"] == 2
    text = render(plan)
    assert "MLOps pipeline run" in text and "mlops-efa-training-serving" in text


def test_cpu_plan_has_an_ec2_lower_bound_labelled_as_such() -> None:
    plan = build_plan(load("mlops-pipeline"))
    (section,) = [rows for title, rows in plan.details["sections"] if title == "MLOps pipeline run"]
    assert section[1] == "Train: 1 x ml.m7i.xlarge, ~0.1 instance-hours"
    floor = [r for r in section if r.startswith("EC2 on-demand list-price lower bound")]
    assert len(floor) <= 1
    assert all("SageMaker ml.* rates are higher" in r for r in floor)


def test_ebs_training_type_keeps_its_volume_size(tmp_path: Path) -> None:
    config = _load(tmp_path, {"instance_type": "ml.m7i.xlarge", "volume_size_gb": 200})
    assert config.mlops.pipeline.training.volume_size_gb == 200


def test_monitoring_on_a_local_nvme_type_takes_no_volume_key(tmp_path: Path) -> None:
    config = _load(tmp_path, monitoring={"image": MONITOR, "instance_type": "ml.g5.xlarge"})
    assert config.mlops.monitoring.volume_key is False
    assert _load(tmp_path).mlops.monitoring.volume_key is True


def test_alarm_emails_are_checked(tmp_path: Path) -> None:
    assert _problem(tmp_path, alarm_emails=["not-an-address"]).startswith("mlops.alarm_emails")


def test_plan_says_when_no_one_is_told_of_failures(tmp_path: Path) -> None:
    plan = build_plan(load("mlops-pipeline"))
    (warning,) = [w for w in plan.warnings if w.startswith("MlopsStack: alarm_emails is empty")]
    assert "no one is subscribed" in warning
    (topic,) = [r for r in plan.resources if r.kind == "SNS topic" and r.stack == "MlopsStack"]
    assert "no subscriber" in topic.detail
    told = build_plan(_load(tmp_path, alarm_emails=["ml-oncall@example.com"]))
    assert not [w for w in told.warnings if "alarm_emails" in w]
    (topic,) = [r for r in told.resources if r.kind == "SNS topic" and r.stack == "MlopsStack"]
    assert "ml-oncall@example.com" in topic.detail


def test_plan_and_readme_give_the_same_teardown_in_order() -> None:
    """`cdk destroy` deletes nothing the deploy function created: the plan and the README say what to delete first."""
    plan = build_plan(load("mlops-pipeline"))
    (rows,) = [rows for title, rows in plan.details["sections"] if title == "MLOps tear down (before cdk destroy)"]
    order = [
        "delete-monitoring-schedule",
        "delete-data-quality-job-definition",
        "delete-endpoint ",
        "wait endpoint-deleted",
        "delete-endpoint-config",
        "delete-model ",
        "cdk destroy",
        "delete-model-package-group",
    ]
    positions = [next(i for i, row in enumerate(rows) if step in row) for step in order]
    assert positions == sorted(positions)
    assert "--monitoring-schedule-name mlops-pipeline-serving-data-quality" in rows[0]
    assert "MLOps tear down" in render(plan)
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Tear down (`mlops-pipeline`)", 1)[1].split("\n## ", 1)[0]
    for row in rows[:8]:
        assert row in section, row
    assert "delete-model-package-group --model-package-group-name mlops-pipeline-models" in section
