"""`mlstack plan` for training blueprints and the rendered job manifest (no synth: config only)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mlstack.config import load
from mlstack.k8s.image import BUILT_IMAGE, with_job_image
from mlstack.k8s.job import LEGACY_ENV, render_job
from mlstack.plan import build_plan, render
from tests.training.test_config import BASE


def _load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def test_default_blueprint_plan_lists_nodes_efa_storage_costs_and_quotas() -> None:
    plan = build_plan(load("eks-gpu-training"))
    sections = dict(plan.details["sections"])
    assert list(sections) == [
        "Access",
        "Updates",
        "Nodes",
        "Accelerators",
        "EFA and network",
        "FSx for Lustre",
        "Job image",
        "First job",
        "Job manifest",
        "Operations",
    ]
    assert "p5: p5.48xlarge x desired 0 (min 0, max 4) in use1-az4" in sections["Nodes"][0]
    assert (
        "32 EFA interfaces per node (1 with an IP, 31 efa-only); 3200 Gbps per node" in sections["EFA and network"][0]
    )
    assert "8x H100 80GiB per node" in sections["Accelerators"][0]
    assert sections["FSx for Lustre"][0].startswith("PERSISTENT_2, 4800 GiB")
    quotas = {q.code: q for q in plan.quotas}
    assert quotas["L-417A185B"].name == "Running On-Demand P instances" and quotas["L-417A185B"].needed == 4 * 192
    assert quotas["L-1194D53C"].service == "eks"
    p5_cost = next(c for c in plan.costs if c.item.startswith("p5.48xlarge"))
    # the post-June-2025 on-demand rate, dated by its source; desired 0 nodes, so 0 $/h until scaled up
    assert p5_cost.unit_per_hour == 55.04 and p5_cost.price_date == "2026-01-21" and p5_cost.quantity == 0
    text = render(plan)
    assert "kind: TrainJob" in text and "Running On-Demand P instances" in text
    metrics = [r for r in plan.resources if r.kind == "GPU/Neuron metrics"]
    assert [r.detail for r in metrics] == ["CloudWatch Container Insights (amazon-cloudwatch-observability add-on)"]
    assert "CloudWatch Container Insights" in text and "DCGM" not in text
    assert any("would cost $220.16/hour" in w for w in plan.warnings)  # 4 x $55.04 at max_size
    system = next(c for c in plan.costs if "system nodes" in c.item)
    assert system.unit_per_hour is None and "no dated EC2 on-demand rate for m7i.xlarge" in system.source


def test_spot_group_uses_the_spot_quota_and_has_no_price(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["training"]["node_groups"].append(
        {"name": "cpu", "instance_type": "m7i.xlarge", "efa": False, "max_size": 2, "capacity": {"type": "spot"}}
    )
    plan = build_plan(_load(tmp_path, data))
    spot = next(c for c in plan.costs if "cpu" in c.item)
    assert spot.unit_per_hour is None and "Spot" in spot.item
    assert any(q.code == "L-34B43A08" and q.needed == 8 for q in plan.quotas)
    assert any(c.startswith("m7i.xlarge cpu") for c in plan.unpriced)


def test_capacity_block_is_reported_with_its_reservation(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["training"]["node_groups"][0]["capacity"] = {
        "type": "capacity_block",
        "reservation_id": "cr-0123456789abcdef0",
    }
    plan = build_plan(_load(tmp_path, data))
    assert any("capacity_block cr-0123456789abcdef0: it must be in use1-az4" in w for w in plan.warnings)
    assert not any(q.code == "L-417A185B" for q in plan.quotas)
    nodes = dict(plan.details["sections"])["Nodes"][0]
    assert "placement group: none" in nodes


def test_model_that_does_not_fit_is_a_plan_warning(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["training"]["model"] = {"params": 70e9, "zero_stage": 0}
    plan = build_plan(_load(tmp_path, data))
    assert any("70B-parameter model" in w for w in plan.warnings)


def test_trainium_job_requests_neuron_devices_and_runs_one_process_per_core() -> None:
    runtime, job = render_job(load("eks-trn1-training"))
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["aws.amazon.com/neuron"] == 16
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == 8
    assert container["command"][:2] == ["torchrun", "--nproc-per-node=32"]
    assert {t["key"] for t in pod["tolerations"]} == {"aws.amazon.com/neuron", "vpc.amazonaws.com/efa"}
    # Not an NCCL job: no NCCL variables; the libfabric ones it does need are checked in test_day_one_and_two.
    nccl = {n for n in LEGACY_ENV if n.startswith("NCCL")} | {"NCCL_DEBUG"}
    assert not {e["name"] for e in container["env"]} & nccl
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "torch-efa-trn1"


def test_job_without_an_image_runs_the_image_the_deploy_builds_and_the_plan_says_where_it_comes_from(
    tmp_path: Path,
) -> None:
    config = _load(tmp_path, copy.deepcopy(BASE))
    runtime, _ = render_job(config)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == BUILT_IMAGE
    plan = build_plan(config)
    assert not any("training.job.image" in w for w in plan.warnings)
    rows = dict(plan.details["sections"])["Job image"]
    assert rows[0].startswith("image: built by `cdk deploy` from runtime/containers/train.Dockerfile")
    assert "cdk-hnb659fds-container-assets-<account>-<region>" in rows[1] and "TrainingImageUri" in rows[1]
    assert rows[2] == "script: /opt/mlstack/runtime/workloads/train.py (the reference script, in the image)"
    start = dict(plan.details["sections"])["First job"]
    assert start[1] == (
        "kubectl -n training get configmap mlstack-job -o jsonpath='{.data.job\\.yaml}' | kubectl apply -f -"
    )


def test_plan_says_trainium_runs_your_script_from_fsx_in_your_image() -> None:
    rows = dict(build_plan(load("eks-trn1-training")).details["sections"])["Job image"]
    assert rows[0].startswith("image: 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:")
    assert (
        rows[1] == "script: /fsx/code/train.py (yours, on FSx: copy it there before the job starts; "
        "no mlstack flags are passed)"
    )


def test_plan_names_the_blueprints_own_image(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["training"]["job"] = {"image": "111122223333.dkr.ecr.us-east-1.amazonaws.com/mine:1"}
    rows = dict(build_plan(_load(tmp_path, data)).details["sections"])["Job image"]
    assert (
        rows[0]
        == "image: 111122223333.dkr.ecr.us-east-1.amazonaws.com/mine:1 (training.job.image, not built by the deploy)"
    )


def test_job_on_a_group_scaled_below_its_node_count_warns(tmp_path: Path) -> None:
    # No node autoscaler is installed: a job asking for more nodes than the group runs stays Pending.
    plan = build_plan(load("eks-gpu-training"))
    assert any(
        "job 'llm-pretrain' asks for 4 node(s) of group 'p5', which has desired_size 0 and no node autoscaler" in w
        for w in plan.warnings
    )
    data = copy.deepcopy(BASE)
    data["training"]["node_groups"][0].update(desired_size=2, min_size=2)
    assert not any("no node autoscaler" in w for w in build_plan(_load(tmp_path, data)).warnings)


def test_fsx_throughput_counts_tib_as_fsx_does() -> None:
    # 4800 GiB x 250 MB/s/TiB: FSx counts 2400 GiB as 2.4 TiB ([BOTO] PerUnitStorageThroughput example).
    rows = dict(build_plan(load("eks-gpu-training")).details["sections"])["FSx for Lustre"]
    assert rows[0].startswith("PERSISTENT_2, 4800 GiB (4.8 TiB as FSx counts it)")
    assert rows[1] == "throughput 250 MB/s/TiB -> 1,200 MB/s aggregate baseline"


def test_efa_summary_counts_only_efa_interfaces(tmp_path: Path) -> None:
    # P6-B300: card 0 is a plain ENA (an IP, no EFA); all 16 EFAs are efa-only.
    data = copy.deepcopy(BASE)
    data["training"]["node_groups"][0].update(instance_type="p6-b300.48xlarge", max_size=1)
    rows = dict(build_plan(_load(tmp_path, data)).details["sections"])["EFA and network"]
    assert "16 EFA interfaces per node (0 with an IP, 16 efa-only)" in rows[0]
    assert "1 interface IP(s) per node" in rows[0]


def test_plan_names_the_batch_job_image_and_script() -> None:
    # batch-training: the deploy builds the image with the reference script, as on EKS.
    rows = dict(build_plan(load("batch-training")).details["sections"])["Job image"]
    assert rows[0].startswith("image: built by `cdk deploy` from runtime/containers/train.Dockerfile")
    assert rows[2] == "script: /opt/mlstack/runtime/workloads/train.py (the reference script, in the image)"
    # With an image of the blueprint's own, it goes into the job definition as it is.
    mine = with_job_image(load("batch-training"), "111122223333.dkr.ecr.us-east-1.amazonaws.com/mine:1")
    rows = dict(build_plan(mine).details["sections"])["Job image"]
    assert rows[0].endswith("(training.job.image, written into the Batch job definition)")
