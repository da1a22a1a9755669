"""EKS serving node autoscaling (`inference.capacity_manager: karpenter`) and scale-to-zero: the validation (one
line each), the Karpenter pool as applied (valid against the pinned CRDs, matching what the servers select and
tolerate, limit = the cost cap), the servers' drain before SIGTERM (the hook's script run against a stub server),
the ScaledObject triggers and the plan's min/max $/h."""

from __future__ import annotations

import copy
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mlstack.access import evaluate
from mlstack.access.cli import stacks_of
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.design.serving_eks import server_designs
from mlstack.design.serving_pools import (
    DRAIN_DELAY_S,
    blocks_drift,
    drain_seconds,
    serving_pools,
    termination_grace_seconds,
)
from mlstack.k8s.karpenter import NodeClassRefs
from mlstack.k8s.serving_drain import DRAIN_SCRIPT
from mlstack.k8s.serving_pools import serving_pool_manifests, serving_triggers
from mlstack.k8s.vllm import scaled_object
from mlstack.plan import build_plan
from tests.inference_eks.edits import load_edited, one_line_problem
from tests.synth import Session
from tests.training.crds import schema

NAME = "eks-llm-serving"
BASE: dict[str, Any] = yaml.safe_load((BLUEPRINTS_DIR / f"{NAME}.yaml").read_text())
HOURS = {"timezone": "Europe/Berlin", "start": "30 7 * * 1-5", "end": "0 19 * * 1-5"}


_load = partial(load_edited, BASE)
_problem = partial(one_line_problem, BASE)


def _scaling(fixed: bool = False, **changes: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        if fixed:
            data["inference"]["capacity_manager"] = "node_groups"
            del data["inference"]["karpenter"]
        data["inference"]["endpoints"][0]["autoscaling"] = changes

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_scaling(min_replicas=1), "capacity_manager karpenter needs autoscaling.max_replicas"),
        (_scaling(fixed=True, min_replicas=0, max_replicas=1), "min_replicas 0 needs inference.capacity_manager"),
        (_scaling(min_replicas=0, max_replicas=1), "min_replicas 0 needs autoscaling.active_hours"),
        (_scaling(min_replicas=1, max_replicas=2, active_hours=HOURS), "active_hours wakes an endpoint from zero"),
        (
            _scaling(min_replicas=0, max_replicas=1, active_hours={**HOURS, "replicas": 2}),
            "active_hours.replicas 2 exceeds max_replicas 1",
        ),
        (
            _scaling(min_replicas=0, max_replicas=1, active_hours={**HOURS, "end": HOURS["start"]}),
            "active_hours start and end are both '30 7 * * 1-5'",
        ),
        (_scaling(min_replicas=0, max_replicas=1, active_hours={**HOURS, "start": "7:30"}), "active_hours.start"),
        (
            lambda d: d["inference"].update(capacity_manager="node_groups"),
            "inference.karpenter is set but capacity_manager is node_groups",
        ),
        (lambda d: d["inference"]["endpoints"][0].update(name="system"), "endpoint name 'system'"),
    ],
)
def test_bad_autoscaling_is_one_clear_line(tmp_path: Path, edit: Any, message: str) -> None:
    assert message in _problem(tmp_path, edit)


def test_karpenter_lifts_the_fixed_node_limit(tmp_path: Path) -> None:
    # 5 servers of TP1 on 4-GPU nodes: 2 nodes at most, the pool's limit 8 GPUs; rejected on a fixed node group.
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["endpoints"][0].update(
            instance_type="g6e.12xlarge", tensor_parallel=1, autoscaling={"min_replicas": 1, "max_replicas": 5}
        )

    config = _load(tmp_path, edit)
    (design,) = server_designs(config.inference_eks)
    assert (design.min_nodes, design.max_nodes) == (1, 2)
    (pool,) = serving_pools(config.inference_eks, config.zones)
    assert pool.limit == 8 and pool.accelerator_resource == "nvidia.com/gpu"


@pytest.mark.parametrize(("min_replicas", "blocked"), [(0, True), (1, True), (2, False)])
def test_drift_keeps_the_node_of_a_lone_server(tmp_path: Path, min_replicas: int, blocked: bool) -> None:
    # al2023@latest marks every node Drifted at each EKS AMI release: with one server, replacing its node is an
    # outage nobody started; from two servers one keeps serving while the other's node is replaced.
    def edit(data: dict[str, Any]) -> None:
        scaling: dict[str, Any] = {"min_replicas": min_replicas, "max_replicas": 2}
        if min_replicas == 0:
            scaling["active_hours"] = {"timezone": "UTC", "start": "0 8 * * 1-5", "end": "0 18 * * 1-5"}
        data["inference"]["endpoints"][0]["autoscaling"] = scaling

    config = _load(tmp_path, edit)
    (design,) = server_designs(config.inference_eks)
    assert blocks_drift(design) is blocked
    (pool,) = serving_pools(config.inference_eks, config.zones)
    refs = NodeClassRefs(
        cluster_name="c", node_role="r", subnet_ids=("subnet-1",), security_group_ids=("sg-1",), kms_key_arn="k"
    )
    docs = serving_pool_manifests(pool, refs, block_drift=blocks_drift(design))
    budgets = next(d for d in docs if d["kind"] == "NodePool")["spec"]["disruption"]["budgets"]
    assert ({"nodes": "0", "reasons": ["Drifted"]} in budgets) is blocked
    assert ("drift kept" in json.dumps(build_plan(config).to_json())) is blocked


@pytest.fixture(scope="module")
def manifests(session: Session) -> list[dict[str, Any]]:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    stacks = stacks_of(session.blueprints[NAME])
    stack = next(s for s in stacks.templates if s.endswith("-InferenceStack"))
    found: list[dict[str, Any]] = []
    for resource in stacks.resources(stack).values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            found += json.loads(stacks.text(stack, resource["Properties"]["Manifest"]))
    return found


def _kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind)


def _deployed(node_class: dict[str, Any]) -> dict[str, Any]:
    """The EC2NodeClass as applied: the IDs the template resolves at deploy time (its GetAtt/Ref names here)."""
    doc = copy.deepcopy(node_class)
    spec = doc["spec"]
    for i, term in enumerate(spec["subnetSelectorTerms"]):
        term["id"] = term["id"] if term["id"].startswith("subnet-") else f"subnet-0{i}23456789abcdef0"
    for i, term in enumerate(spec["securityGroupSelectorTerms"]):
        term["id"] = term["id"] if term["id"].startswith("sg-") else f"sg-0{i}23456789abcdef0"
    return doc


def test_the_pool_is_valid_against_the_pinned_karpenter_crds(manifests: list[dict[str, Any]]) -> None:
    for doc in (_deployed(_kind(manifests, "EC2NodeClass")), _kind(manifests, "NodePool")):
        jsonschema.validate(doc, schema(doc["kind"], doc["apiVersion"]))
    broken = copy.deepcopy(_kind(manifests, "NodePool"))
    broken["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("NodePool", broken["apiVersion"]))


def test_the_pool_launches_nodes_the_servers_select_and_tolerate(manifests: list[dict[str, Any]]) -> None:
    pool = _kind(manifests, "NodePool")["spec"]
    node = pool["template"]
    pod = _kind(manifests, "Deployment")["spec"]["template"]["spec"]
    # Karpenter launches for a pending pod only from a pool whose labels its node selector matches and whose taints
    # it tolerates (Karpenter docs, Scheduling).
    for key, value in pod["nodeSelector"].items():
        assert node["metadata"]["labels"][key] == value
    for taint in node["spec"]["taints"]:
        assert any(t["key"] == taint["key"] and t["effect"] == taint["effect"] for t in pod["tolerations"])
    requirements = {r["key"]: r["values"] for r in node["spec"]["requirements"]}
    assert requirements == {
        "node.kubernetes.io/instance-type": ["g6e.xlarge"],
        "topology.k8s.aws/zone-id": ["use1-az4", "use1-az6"],
        "karpenter.sh/capacity-type": ["on-demand"],
    }
    # The cost cap: max_replicas 2 servers of one GPU each.
    assert pool["limits"] == {"nvidia.com/gpu": "2"}
    assert pool["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "10m",
        # One server (min_replicas 1): a new AMI release (al2023@latest) must not replace its only node.
        "budgets": [{"nodes": "1"}, {"nodes": "0", "reasons": ["Drifted"]}],
    }
    node_class = _kind(manifests, "EC2NodeClass")["spec"]
    assert len(node_class["subnetSelectorTerms"]) == 2  # both private subnets, one per zone
    assert node_class["metadataOptions"]["httpTokens"] == "required" and node_class["associatePublicIPAddress"] is False
    assert node_class["blockDeviceMappings"][0]["ebs"]["encrypted"] is True


def test_a_stopping_server_drains_and_keda_owns_the_replicas(manifests: list[dict[str, Any]]) -> None:
    deployment = _kind(manifests, "Deployment")
    # An apply of the manifest (every stack update) would reset the fleet KEDA scaled to a value written here.
    assert "replicas" not in deployment["spec"]
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    command = server["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:3] == ["python3", "-c", DRAIN_SCRIPT]
    design = server_designs(load(NAME).inference_eks)[0]  # type: ignore[arg-type]
    assert command[3:] == [str(DRAIN_DELAY_S), str(drain_seconds(design)), "8000"]
    # The kubelet's grace period covers the hook's delay and drain and vLLM's exit.
    assert pod["terminationGracePeriodSeconds"] == termination_grace_seconds(design)
    assert pod["terminationGracePeriodSeconds"] >= DRAIN_DELAY_S + drain_seconds(design)
    # One longest request: 4,608 tokens at ~58 ms per token.
    assert 240 <= drain_seconds(design) <= 300
    budget = _kind(manifests, "PodDisruptionBudget")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


class _Vllm(http.server.BaseHTTPRequestHandler):
    """A vLLM-like /metrics: `busy_until` (monotonic) says until when one request runs."""

    busy_until = 0.0

    def do_GET(self) -> None:
        running = 1 if time.monotonic() < self.busy_until else 0
        body = (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def vllm() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Vllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _drain(port: int, budget: int) -> float:
    """Seconds the preStop script takes (delay 0), run on a Python as the image runs it."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", DRAIN_SCRIPT, "0", str(budget), str(port)], check=True, timeout=60)
    return time.monotonic() - start


def test_the_drain_waits_for_the_running_request_and_no_longer(vllm: int) -> None:
    _Vllm.busy_until = time.monotonic() + 3
    took = _drain(vllm, budget=30)
    assert 3 <= took < 8  # returned once the request finished (two idle readings a second apart)
    _Vllm.busy_until = time.monotonic() + 60
    took = _drain(vllm, budget=2)
    assert 2 <= took < 6  # a request longer than the budget: the hook gives up, SIGTERM follows


def test_the_drain_ends_at_once_when_the_server_is_gone() -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    assert _drain(port, budget=30) < 3


def test_scale_to_zero_wakes_on_the_schedule_and_stays_while_requests_run(tmp_path: Path) -> None:
    config = _load(tmp_path, _scaling(min_replicas=0, max_replicas=2, active_hours=HOURS))
    eks = config.inference_eks
    (design,) = server_designs(eks)
    assert (design.min_replicas, design.min_nodes, design.max_nodes) == (0, 0, 2)
    hours = eks.endpoints[0].autoscaling.active_hours
    doc = serving_triggers(
        scaled_object(design, namespace="serving", model_name="m"), design, model_name="m", active_hours=hours
    )
    spec = doc["spec"]
    assert spec["minReplicaCount"] == 0 and spec["cooldownPeriod"] == 600
    waiting, running, cron = spec["triggers"]
    assert waiting["metadata"]["valueLocation"] == 'vllm:num_requests_waiting{model_name="m"}'
    # Active while a request runs (activation above 0), so zero comes only once the last request ended.
    assert running["metadata"]["valueLocation"] == 'vllm:num_requests_running{model_name="m"}'
    assert running["metadata"]["targetValue"] == "16" and "activationTargetValue" not in running["metadata"]
    assert cron == {
        "type": "cron",
        "metadata": {**HOURS, "desiredReplicas": "1"},
    }
    plan = build_plan(config).to_json()
    (chat,) = plan["details"]["inference_eks"]
    assert chat["per_hour_min"] == 0 and chat["nodes"] == [0, 2]


def test_the_plan_prices_the_pool_from_min_to_max() -> None:
    plan = build_plan(load(NAME)).to_json()
    (chat,) = plan["details"]["inference_eks"]
    assert chat["node_autoscaler"] == "karpenter" and chat["nodes"] == [1, 2]
    assert chat["per_hour_max"] == pytest.approx(2 * chat["per_hour_min"]) and chat["per_hour_min"] > 0
    rows = [r for r in plan["resources"] if r["stack"] == "InferenceStack" and r["kind"] == "Karpenter pool"]
    assert [r["type"] for r in rows] == ["Custom::AWSCDK-EKS-KubernetesResource"]
    assert "limit 2 nvidia.com/gpu" in rows[0]["detail"]


def test_karpenter_launching_a_serving_node_and_the_node_pulling_the_server_are_allowed(session: Session) -> None:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    report = evaluate(NAME, stacks_of(session.blueprints[NAME]))
    assert not report.denied
    controller = [c for c in report.calls if "KarpenterControllerRole" in c.role_arn]
    launched = {(c.action, c.resource.split(":")[-1].split("/")[0]) for c in controller}
    assert {("ec2:CreateFleet", "fleet"), ("ec2:RunInstances", "instance"), ("iam:PassRole", "role")} <= launched
    # The pool's node (Karpenter's node role, joined through its EC2_LINUX access entry) pulls the vLLM image.
    node = [c for c in report.calls if "KarpenterNodeRole" in c.role_arn and c.action == "ecr:BatchGetImage"]
    assert "arn:aws:ecr:us-east-1:763104351884:repository/vllm" in {c.resource for c in node}
