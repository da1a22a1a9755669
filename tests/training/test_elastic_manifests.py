"""Karpenter pools and Kueue queues as rendered: the no-interruption rules, limits, the EFA layout, and every manifest
valid against the CRD schemas of the pinned Karpenter and Kueue releases (`tests/training/crds.py`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mlstack.catalog import efa_interface_count, efa_layout
from mlstack.config import load
from mlstack.config.blueprint import BlueprintConfig
from mlstack.design.karpenter import Pool, karpenter_interfaces, pools
from mlstack.design.kueue import longest_unready_hold_minutes, queues
from mlstack.k8s.job import render_job
from mlstack.k8s.karpenter import DO_NOT_DISRUPT, NodeClassRefs, pool_manifests
from mlstack.k8s.kueue import controller_config, queue_manifests
from tests.synth import ROOT
from tests.training.crds import schema

SHIPPED = ROOT / "blueprints" / "eks-karpenter-training.yaml"
REFS = NodeClassRefs(
    cluster_name="c",
    node_role="c-karpenter-node",
    subnet_ids=("subnet-0123456789abcdef0",),
    security_group_ids=("sg-0123456789abcdef0", "sg-0fedcba9876543210"),
    kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000",
    placement_group="pg-name",
)


def _config(tmp_path: Path, edit: Any = None) -> BlueprintConfig:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    if edit is not None:
        edit(data)
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load(path)


def _pool(config: BlueprintConfig) -> Pool:
    assert config.training is not None
    return pools(config.training, config.zones)[0]


def _valid(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, schema(doc["kind"], doc["apiVersion"]))


def _cel_network_interfaces(interfaces: list[dict[str, Any]]) -> None:
    """The EC2NodeClass CRD's two x-kubernetes-validations rules on networkInterfaces (CEL, which jsonschema skips)."""
    assert not interfaces or any(
        n["deviceIndex"] == 0 and n["networkCardIndex"] == 0 and n["interfaceType"] == "interface" for n in interfaces
    ), "networkInterfaces must include a primary interface with interfaceType='interface'"
    for n in interfaces:
        same = [
            m
            for m in interfaces
            if (m["networkCardIndex"], m["deviceIndex"]) == (n["networkCardIndex"], n["deviceIndex"])
        ]
        assert len(same) == 1, f"duplicate card/device {n}"
        efa_only = [
            m for m in interfaces if m["networkCardIndex"] == n["networkCardIndex"] and m["interfaceType"] == "efa-only"
        ]
        assert n["interfaceType"] != "efa-only" or len(efa_only) == 1, f"two efa-only on card {n['networkCardIndex']}"


def test_training_pool_never_interrupts_a_job(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _, node_pool, *_ = pool_manifests(_pool(config), REFS)
    disruption = node_pool["spec"]["disruption"]
    assert disruption["consolidationPolicy"] == "WhenEmpty"
    assert int(disruption["consolidateAfter"].removesuffix("m")) >= 10
    assert disruption["budgets"] == [{"nodes": "0", "reasons": ["Drifted", "Underutilized"]}]
    template = node_pool["spec"]["template"]["spec"]
    assert template["expireAfter"] == "Never"
    karpenter = config.training.karpenter  # type: ignore[union-attr]
    assert karpenter is not None
    assert int(template["terminationGracePeriod"].removesuffix("m")) >= karpenter.checkpoint_interval_minutes
    runtime, _job = render_job(config)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"


def test_pool_limit_is_max_nodes_times_accelerators(tmp_path: Path) -> None:
    _, node_pool, *_ = pool_manifests(_pool(_config(tmp_path)), REFS)
    assert node_pool["spec"]["limits"] == {"nvidia.com/gpu": "32"}  # max_size 4 x 8 H100


def test_pool_is_pinned_to_the_group_subnet_zone_and_taints(tmp_path: Path) -> None:
    node_class, node_pool, *_ = pool_manifests(_pool(_config(tmp_path)), REFS)
    assert node_class["spec"]["subnetSelectorTerms"] == [{"id": "subnet-0123456789abcdef0"}]
    requirements = {r["key"]: r["values"] for r in node_pool["spec"]["template"]["spec"]["requirements"]}
    assert requirements == {
        "node.kubernetes.io/instance-type": ["p5.48xlarge"],
        "topology.k8s.aws/zone-id": ["use1-az4"],
        "karpenter.sh/capacity-type": ["on-demand"],
    }
    taints = {t["key"] for t in node_pool["spec"]["template"]["spec"]["taints"]}
    assert taints == {"nvidia.com/gpu", "vpc.amazonaws.com/efa"}
    assert node_pool["spec"]["template"]["metadata"]["labels"]["mlstack.io/node-group"] == "p5"
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"
    assert node_class["spec"]["associatePublicIPAddress"] is False
    assert node_class["spec"]["placementGroupSelector"] == {"name": "pg-name"}


@pytest.mark.parametrize(
    "instance_type", ["p5.48xlarge", "p4d.24xlarge", "p6-b300.48xlarge", "trn1.32xlarge", "g6e.8xlarge"]
)
def test_network_interfaces_keep_every_efa_with_one_ip(instance_type: str) -> None:
    interfaces = karpenter_interfaces(instance_type, efa_on_every_card=False)
    assert interfaces is not None
    rendered = [
        {"networkCardIndex": n.network_card_index, "deviceIndex": n.device_index, "interfaceType": n.interface_type}
        for n in interfaces
    ]
    _cel_network_interfaces(rendered)
    assert sum(n.is_efa for n in interfaces) == efa_interface_count(instance_type)
    assert [n.interface_type for n in interfaces].count("interface") == 1  # one IP per node
    assert {n.network_card_index for n in interfaces if n.is_efa} == {
        n.network_card_index for n in efa_layout(instance_type) if n.is_efa
    }


def test_efa_on_every_card_is_karpenters_own_layout() -> None:
    assert karpenter_interfaces("p5.48xlarge", efa_on_every_card=True) is None


def _capacity_block(data: dict[str, Any]) -> None:
    group = data["training"]["node_groups"][0]
    group["capacity"] = {"type": "capacity_block", "reservation_id": "cr-0aa11bb22cc33dd44"}


def test_capacity_block_pool_selects_the_reservation_as_reserved(tmp_path: Path) -> None:
    pool = _pool(_config(tmp_path, _capacity_block))
    node_class, node_pool, *_ = pool_manifests(pool, NodeClassRefs(**{**REFS.__dict__, "placement_group": None}))
    assert node_class["spec"]["capacityReservationSelectorTerms"] == [{"id": "cr-0aa11bb22cc33dd44"}]
    assert "placementGroupSelector" not in node_class["spec"]  # a block fixes placement
    requirements = {r["key"]: r["values"] for r in node_pool["spec"]["template"]["spec"]["requirements"]}
    assert requirements["karpenter.sh/capacity-type"] == ["reserved"]
    assert pool.placement_group is False
    assert pool.max_per_hour() is None  # prepaid per block, not priced per hour


def _variants() -> list[tuple[str, Any]]:
    def every_card(data: dict[str, Any]) -> None:
        data["training"]["node_groups"][0]["efa_on_every_card"] = True

    def trn(data: dict[str, Any]) -> None:
        data["training"]["node_groups"][0]["instance_type"] = "trn1.32xlarge"
        data["training"]["job"].update(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/neuron:1", script="/t.py")

    def node_groups(data: dict[str, Any]) -> None:
        data["training"]["capacity_manager"] = "node_groups"
        data["training"].pop("karpenter")

    return [
        ("shipped", None),
        ("capacity_block", _capacity_block),
        ("every_card", every_card),
        ("trn1", trn),
        ("node_groups", node_groups),
    ]


@pytest.mark.parametrize(("name", "edit"), _variants())
def test_every_manifest_is_valid_against_the_pinned_crds(tmp_path: Path, name: str, edit: Any) -> None:
    config = _config(tmp_path, edit)
    assert config.training is not None
    for pool in pools(config.training, config.zones):
        for doc in pool_manifests(pool, REFS):
            _valid(doc)
            _cel_network_interfaces(doc["spec"].get("networkInterfaces", []))
    design = queues(config.training)
    assert design is not None
    docs = queue_manifests(design)
    for doc in docs:
        if doc["apiVersion"].startswith("kueue.x-k8s.io/"):
            _valid(doc)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ClusterQueue") == kinds.count("LocalQueue") == 2
    assert ("Topology" in kinds) == (name == "node_groups")  # TAS only where nodes exist before admission


def test_a_typo_in_a_manifest_fails_the_schema(tmp_path: Path) -> None:
    node_class, *_ = pool_manifests(_pool(_config(tmp_path)), REFS)
    broken = copy.deepcopy(node_class)
    broken["spec"]["networkInterfaces"][1]["interfaceType"] = "efa"  # not a type this CRD version accepts
    with pytest.raises(jsonschema.ValidationError):
        _valid(broken)
    broken = copy.deepcopy(node_class)
    broken["spec"]["subnetSelector"] = {"id": "subnet-1"}
    with pytest.raises(jsonschema.ValidationError):
        _valid(broken)


def test_kueue_queues_share_one_cohort_with_fair_sharing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config.training is not None
    design = queues(config.training)
    assert design is not None
    docs = queue_manifests(design)
    cqs = [d for d in docs if d["kind"] == "ClusterQueue"]
    assert {d["spec"]["cohortName"] for d in cqs} == {"mlstack"}
    assert all(d["spec"]["preemption"]["reclaimWithinCohort"] == "Any" for d in cqs)
    quota = cqs[0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert quota == {"name": "nvidia.com/gpu", "nominalQuota": 16, "borrowingLimit": 8}
    priorities = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "WorkloadPriorityClass"}
    assert priorities["inference"] > priorities["training"] > priorities["experiments"]
    settings = yaml.safe_load(controller_config())
    assert "fairSharing" in settings and "trainer.kubeflow.org/trainjob" in settings["integrations"]["frameworks"]
    assert settings["manageJobsWithoutQueueName"] is False
    ready = settings["waitForPodsReady"]
    assert ready["timeout"] == "30m"  # a half-started job gives its quota and nodes back


def test_a_half_started_gang_is_deactivated_not_requeued_forever() -> None:
    # Kueue's default backoffLimitCount (null) requeues forever: a gang with one of two p5 nodes launched could hold
    # that node without end. Config v1beta2 RequeuingStrategy: backoffLimitCount, backoffBaseSeconds/MaxSeconds.
    strategy = yaml.safe_load(controller_config())["waitForPodsReady"]["requeuingStrategy"]
    assert strategy == {
        "timestamp": "Eviction",
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 3600,
    }
    assert longest_unready_hold_minutes() == 4 * 30 + (60 + 120 + 240) / 60  # about 2 h, then deactivated


def test_rendered_job_waits_suspended_in_its_teams_queue(tmp_path: Path) -> None:
    config = _config(tmp_path)
    runtime, job = render_job(config)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "mlstack-training"
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "research",
        "kueue.x-k8s.io/priority-class": "training",
    }


def test_job_without_teams_is_not_suspended(tmp_path: Path) -> None:
    def no_teams(data: dict[str, Any]) -> None:
        data["training"].pop("teams")
        data["training"]["job"].pop("team")

    _runtime, job = render_job(_config(tmp_path, no_teams))
    assert "suspend" not in job["spec"] and "labels" not in job["metadata"]


def test_karpenter_knows_the_efa_nodes_huge_pages(tmp_path: Path) -> None:
    """Without the overlay no instance type has `hugepages-2Mi` in Karpenter's simulation: the job's pods, which
    request it, would stay Pending with no node launched."""
    config = _config(tmp_path)
    docs = pool_manifests(_pool(config), REFS)
    overlay = next(d for d in docs if d["kind"] == "NodeOverlay")
    _valid(overlay)
    runtime, _ = render_job(config)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    wanted = pod["containers"][0]["resources"]["requests"]["hugepages-2Mi"]
    have = overlay["spec"]["capacity"]["hugepages-2Mi"]
    assert int(have.removesuffix("Mi")) >= int(wanted.removesuffix("Mi"))
    assert overlay["spec"]["requirements"] == [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["p5"]}]
