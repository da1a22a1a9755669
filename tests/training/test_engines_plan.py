"""`mlstack plan` for the HyperPod (Slurm) and Batch blueprints: ml.* names, unknown prices stay unknown, quotas."""

from __future__ import annotations

import inspect

from mlstack.catalog.prices import price
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.plan import build_plan, render


def test_hyperpod_plan_names_ml_types_and_leaves_prices_unknown() -> None:
    plan = build_plan(load(BLUEPRINTS_DIR / "hyperpod-slurm-training.yaml"))
    groups = {r.detail: r.count for r in plan.resources if r.kind == "Instance group"}
    assert groups == {"controller: ml.m7i.xlarge": 1, "login: ml.m7i.xlarge": 1, "p5: ml.p5.48xlarge": 2}
    hyperpod_costs = [c for c in plan.costs if "(HyperPod)" in c.item]
    assert len(hyperpod_costs) == 3 and all(c.unit_per_hour is None for c in hyperpod_costs)
    quotas = {q.name: (q.code, q.needed) for q in plan.quotas if q.service == "sagemaker"}
    assert quotas == {
        "ml.m7i.xlarge for cluster usage": ("unknown", 2),
        "ml.p5.48xlarge for cluster usage": ("unknown", 2),
    }
    text = render(plan)
    assert "p5: ml.p5.48xlarge x 2; 32 EFA per node" in text
    assert "No price known for: ml.m7i.xlarge controller (HyperPod)" in text
    assert not any(r.kind == "EKS cluster" for r in plan.resources)


def test_batch_plan_costs_nothing_idle_and_prices_a_job() -> None:
    plan = build_plan(load(BLUEPRINTS_DIR / "batch-training.yaml"))
    (cost,) = [c for c in plan.costs if c.item.startswith("p5.48xlarge")]
    dated = price("p5.48xlarge")  # the dated on-demand rate, never the instance catalog's undated figure
    assert dated is not None and dated.usd_per_hour == 55.04
    assert cost.quantity == 0 and cost.unit_per_hour == dated.usd_per_hour and cost.price_date == dated.as_of
    price_ = dated.usd_per_hour
    text = render(plan)
    assert f"a 2-node job costs ${price_ * 2:,.2f}/hour while it runs" in text
    assert "multinode, 2 nodes, torchrun, 32 uverbs devices" in text
    (quota,) = [q for q in plan.quotas if q.code == "L-417A185B"]
    assert quota.needed == 2 * 192


def test_batch_plan_names_the_ami_the_update_strategy_and_the_container_network() -> None:
    from mlstack.constructs.training import batch

    plan = build_plan(load(BLUEPRINTS_DIR / "batch-training.yaml"))
    text = render(plan)
    assert (
        "ECS_AL2023_NVIDIA AMI, BEST_FIT_PROGRESSIVE (takes launch-template updates; running jobs keep 7200 min" in text
    )
    assert "VPC default group (the interface of every job container): TCP between containers, HTTPS out" in text
    assert "mlstack acceptance batch-training --image" in text
    # the plan's constants are the construct's defaults
    assert batch.ALLOCATION_STRATEGY == "BEST_FIT_PROGRESSIVE"
    default = inspect.signature(batch.BatchMultiNodeTraining.__init__).parameters["image_type"].default
    assert default == "ECS_AL2023_NVIDIA"


def test_batch_plan_says_the_deploy_builds_the_image_with_the_script_and_how_to_submit() -> None:
    from mlstack.config.training import SHIPPED_SCRIPT
    from mlstack.constructs.training import batch

    text = render(build_plan(load(BLUEPRINTS_DIR / "batch-training.yaml")))
    assert "image: built by `cdk deploy` from runtime/containers/train.Dockerfile" in text
    assert f"script: {SHIPPED_SCRIPT} (the reference script, in the image)" in text
    assert "/fsx/code" not in text
    assert "--job-queue <output BatchJobQueue> --job-definition <output BatchJobDefinition>" in text
    # the construct's default script and update timeout are the blueprint defaults
    params = inspect.signature(batch.BatchMultiNodeTraining.__init__).parameters
    assert params["script"].default == SHIPPED_SCRIPT
    assert params["update_job_timeout_minutes"].default == batch.UPDATE_JOB_TIMEOUT_MINUTES == 7200
    from mlstack.config.training_engines import BatchConfig

    assert BatchConfig().update_job_timeout_minutes == batch.UPDATE_JOB_TIMEOUT_MINUTES
