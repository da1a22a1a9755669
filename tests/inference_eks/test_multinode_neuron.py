"""Multi-node (LeaderWorkerSet) and Neuron vLLM endpoints: validation, layout, and the `eks-llm-serving-multinode`
manifests as the stack applies them (Kubernetes 1.35 schemas, strict; the LeaderWorkerSet against the pinned LWS
release's CRD, `tests/training/crds.py`)."""

from __future__ import annotations

import copy
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mlstack.access.cli import stacks_of
from mlstack.access.workloads import pod_specs
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.constructs.training import versions
from mlstack.design.serving_eks import server_designs
from mlstack.design.serving_multinode import RAY_OBJECT_STORE_BYTES, leader_script, worker_script
from mlstack.design.serving_neuron import COMPILED_DIR
from mlstack.design.serving_pools import DRAIN_DELAY_S, drain_seconds, termination_grace_seconds
from mlstack.k8s.serving_drain import DRAIN_SCRIPT, LEADER_ENV
from mlstack.k8s.serving_pools import LWS_NAME_LABEL
from mlstack.k8s.vllm import SHM_GIB
from mlstack.k8s.vllm_multinode import LWS_API
from tests.inference_eks.edits import load_edited, one_line_problem
from tests.synth import Session
from tests.training.crds import schema

NAME = "eks-llm-serving-multinode"
STORE = RAY_OBJECT_STORE_BYTES
K8S_VERSION = "1.35.0"
BASE: dict[str, Any] = yaml.safe_load((BLUEPRINTS_DIR / f"{NAME}.yaml").read_text())


_load = partial(load_edited, BASE)
_problem = partial(one_line_problem, BASE)


def _endpoint(index: int, **changes: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["endpoints"][index].update(changes)

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_endpoint(1, instance_type="inf1.6xlarge"), "inf1.6xlarge: Inferentia (inf1, NeuronCore-v1) does not serve"),
        (_endpoint(1, instance_type="inf2.xlarge"), "inf2.xlarge has 16 GiB of host memory"),
        (_endpoint(1, tensor_parallel=3), "tensor_parallel 3 is counted in NeuronCores on inf2.8xlarge"),
        (_endpoint(1, instance_type="inf2.24xlarge", nodes=2), "the Neuron vLLM image for Inf2/Trn1 serves on one"),
        (_endpoint(0, nodes=2, tensor_parallel=2), "a multi-node server uses every GPU of each node (1 on g5.8xlarge)"),
        (_endpoint(0, instance_type="g5.xlarge"), "nor over several nodes (it has no EFA)"),
        (_endpoint(0, nodes=17), "inference.endpoints.0.nodes"),
        (
            _endpoint(0, autoscaling={"min_replicas": 1, "max_replicas": 2}),
            "max_replicas 2 exceeds the 1 server(s) its 2 g5.8xlarge node(s) hold",
        ),
        (
            lambda d: d["inference"]["model"].update(parameters_billion=405),
            "more than 16 g5.8xlarge node(s) hold",
        ),
        (
            lambda d: d["inference"].update(capacity_manager="karpenter"),
            "endpoint 'chat-pp' spans 2 nodes (LeaderWorkerSet): its nodes need EFA in one placement group, which the "
            "Karpenter serving pools do not give; use capacity_manager: node_groups",
        ),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, edit: Any, message: str) -> None:
    assert message in _problem(tmp_path, edit)


def test_a_multi_node_endpoint_is_not_told_that_karpenter_adds_nodes(tmp_path: Path) -> None:
    # Karpenter is no fix for a server over several nodes (rejected above); for a single-node one it is.
    assert "karpenter" not in _problem(tmp_path, _endpoint(0, autoscaling={"min_replicas": 1, "max_replicas": 2}))
    single = _problem(tmp_path, _endpoint(1, autoscaling={"min_replicas": 1, "max_replicas": 2}))
    assert single.endswith("set max_replicas <= 1, or inference.capacity_manager: karpenter to add nodes")


def test_one_server_spans_the_fewest_efa_nodes_that_hold_the_model(tmp_path: Path) -> None:
    pp, neuron = server_designs(_load(tmp_path).inference_eks)
    # 8B bf16 + the KV cache of 16 x 4,608 tokens: ~24 GiB, over 85% of one A10G's 22.35 GiB; 12 GiB on each of two.
    assert (pp.pipeline_parallel, pp.tensor_parallel, pp.min_nodes, pp.max_replicas) == (2, 1, 2, 1)
    args = pp.vllm_args("m")
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert pp.figures is not None and "PP2 over 2 nodes" in pp.figures.detail
    # Neuron: the degree counts NeuronCores (2 on the one Inferentia2 chip), no GPU memory fraction
    assert (neuron.accelerator, neuron.tensor_parallel, neuron.devices_per_pod) == ("neuron", 2, 1)
    nargs = neuron.vllm_args("m")
    assert "--gpu-memory-utilization" not in nargs and "--no-enable-prefix-caching" in nargs
    assert nargs[nargs.index("--num-gpu-blocks-override") + 1] == "16"


def test_explicit_nodes_split_a_model_that_would_fit_one_node(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["endpoints"][0].update(instance_type="g6e.8xlarge", nodes=2)

    pp = server_designs(_load(tmp_path, edit).inference_eks)[0]
    assert (pp.pipeline_parallel, pp.min_nodes) == (2, 2)


# --- the synthesized blueprint ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(session: Session) -> tuple[Any, str]:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    stacks = stacks_of(session.blueprints[NAME])
    return stacks, next(s for s in stacks.templates if s.endswith("-InferenceStack"))


@pytest.fixture(scope="module")
def manifests(stack: tuple[Any, str]) -> list[dict[str, Any]]:
    stacks, name = stack
    found: list[dict[str, Any]] = []
    for resource in stacks.resources(name).values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            found += json.loads(stacks.text(name, resource["Properties"]["Manifest"]))
    return found


def _named(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def test_the_leader_worker_set_is_valid_against_the_pinned_lws_crd(manifests: list[dict[str, Any]]) -> None:
    lws = _named(manifests, "LeaderWorkerSet", "vllm-chat-pp")
    assert lws["apiVersion"] == LWS_API
    jsonschema.validate(lws, schema("LeaderWorkerSet", LWS_API))
    # ... and each pod template against the Kubernetes schema (the CRD keeps them open), strictly
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][role]
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()}, "template": template},
            K8S_VERSION,
            strict=True,
        )
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("LeaderWorkerSet", LWS_API))


def test_every_other_manifest_validates_against_the_kubernetes_schema(manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        if manifest["kind"] in ("LeaderWorkerSet", "ScaledObject"):
            continue
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_the_group_runs_rays_head_on_the_leader_and_every_pod_has_the_nodes_efa(
    manifests: list[dict[str, Any]],
) -> None:
    spec = _named(manifests, "LeaderWorkerSet", "vllm-chat-pp")["spec"]["leaderWorkerTemplate"]
    assert spec["size"] == 2 and spec["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = (spec[k]["spec"] for k in ("leaderTemplate", "workerTemplate"))
    lead, work = leader["containers"][0], worker["containers"][0]
    assert lead["command"][2].startswith("ray start --head --port=6379")
    assert '-ge "$LWS_GROUP_SIZE"' in lead["command"][2] and 'exec vllm serve "$@"' in lead["command"][2]
    assert "--pipeline-parallel-size" in lead["args"]
    assert 'ray start --address="$LWS_LEADER_ADDRESS:6379"' in work["command"][2] and "args" not in work
    for pod, container in ((leader, lead), (worker, work)):
        limits = container["resources"]["limits"]
        assert limits["vpc.amazonaws.com/efa"] == "1" and limits["hugepages-2Mi"] == "5120Mi"
        assert limits["nvidia.com/gpu"] == "1"
        assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "vpc.amazonaws.com/efa"}
        assert any(m["mountPath"] == "/models" and m["readOnly"] for m in container["volumeMounts"])
    # the API key and the probes on the leader only (the workers serve no HTTP)
    assert leader["initContainers"][0]["name"] == "api-key" and "initContainers" not in worker
    assert lead["readinessProbe"]["httpGet"]["path"] == "/health" and "readinessProbe" not in work
    # the leader's startup probe also waits for the workers' image pulls and Ray start (10 minutes more)
    startup = lead["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300 + 600


def test_the_group_drains_before_it_stops_and_keda_owns_its_replicas(manifests: list[dict[str, Any]]) -> None:
    lws = _named(manifests, "LeaderWorkerSet", "vllm-chat-pp")
    # An apply of the manifest (every stack update) would reset the groups KEDA scaled to a value written here.
    assert "replicas" not in lws["spec"]
    spec = lws["spec"]["leaderWorkerTemplate"]
    design = server_designs(load(NAME).inference_eks)[0]  # type: ignore[arg-type]
    leader, worker = (spec[k]["spec"] for k in ("leaderTemplate", "workerTemplate"))
    drain = [str(DRAIN_DELAY_S), str(drain_seconds(design)), "8000"]
    # The leader drains its own server; the workers (its pipeline stages) wait for the leader's queue.
    assert leader["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["python3", "-c", DRAIN_SCRIPT, *drain]
    assert worker["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == [
        "python3",
        "-c",
        DRAIN_SCRIPT,
        *drain,
        LEADER_ENV,
    ]
    for pod in (leader, worker):
        assert pod["terminationGracePeriodSeconds"] == termination_grace_seconds(design)
    # The budget covers every pod of the set (an evicted worker restarts its group), one at a time.
    budget = _named(manifests, "PodDisruptionBudget", "vllm-chat-pp")["spec"]
    assert budget["selector"] == {"matchLabels": {LWS_NAME_LABEL: "vllm-chat-pp"}} and budget["maxUnavailable"] == 1
    # The Neuron server drains as a GPU one does: the Neuron vLLM image serves the same /metrics.
    neuron = _named(manifests, "Deployment", "vllm-chat-neuron")["spec"]["template"]["spec"]
    assert neuron["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][:3] == ["python3", "-c", DRAIN_SCRIPT]
    assert (
        _named(manifests, "PodDisruptionBudget", "vllm-chat-neuron")["spec"]["selector"]
        == (_named(manifests, "Deployment", "vllm-chat-neuron")["spec"]["selector"])
    )


def test_a_worker_hook_waits_for_the_leaders_queue(tmp_path: Path) -> None:
    # The worker's hook as the image runs it, against a stand-in leader /metrics that is busy for 3 s.
    busy_until = time.monotonic() + 3

    class Leader(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            running = 1 if time.monotonic() < busy_until else 0
            body = f'vllm:num_requests_running{{model_name="m"}} {running}.0\n'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Leader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])
    try:
        env = {**os.environ, LEADER_ENV: "127.0.0.1"}
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", DRAIN_SCRIPT, "0", "30", port, LEADER_ENV], env=env, check=True)
        assert 3 <= time.monotonic() - start < 8
        # Without the leader's address (not in a LeaderWorkerSet) the hook ends at once.
        env.pop(LEADER_ENV)
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", DRAIN_SCRIPT, "0", "30", port, LEADER_ENV], env=env, check=True)
        assert time.monotonic() - start < 3
    finally:
        server.shutdown()
        server.server_close()


def test_the_service_and_keda_reach_the_leaders_only(manifests: list[dict[str, Any]]) -> None:
    lws = _named(manifests, "LeaderWorkerSet", "vllm-chat-pp")["spec"]["leaderWorkerTemplate"]
    selector = _named(manifests, "Service", "vllm-chat-pp-api")["spec"]["selector"]
    leader_labels = lws["leaderTemplate"]["metadata"]["labels"]
    worker_labels = lws["workerTemplate"]["metadata"]["labels"]
    assert selector.items() <= leader_labels.items()
    assert not selector.items() <= worker_labels.items()
    target = _named(manifests, "ScaledObject", "vllm-chat-pp")["spec"]["scaleTargetRef"]
    assert target == {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": "vllm-chat-pp"}


def test_the_neuron_server_requests_chips_and_compiles_into_a_writable_directory(
    manifests: list[dict[str, Any]],
) -> None:
    pod = _named(manifests, "Deployment", "vllm-chat-neuron")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == (
        "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04"
    )
    assert container["resources"]["limits"]["aws.amazon.com/neuron"] == "1"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert [t["key"] for t in pod["tolerations"]] == ["aws.amazon.com/neuron"]
    # Without NEURON_COMPILED_ARTIFACTS the plugin writes under the model directory: the read-only weights mount.
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NEURON_COMPILED_ARTIFACTS"] == COMPILED_DIR and not COMPILED_DIR.startswith("/models")
    mount = next(m for m in container["volumeMounts"] if COMPILED_DIR.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume and not mount.get("readOnly")
    # the first start compiles: the startup probe allows more than an hour
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 3600


def test_the_stack_installs_lws_with_wait_and_applies_the_group_after_its_efa_nodes(stack: tuple[Any, str]) -> None:
    stacks, name = stack
    resources = stacks.resources(name)
    charts = {r["Properties"]["Release"]: (lid, r) for lid, r in resources.items() if r["Type"].endswith("HelmChart")}
    assert set(charts) == {
        "nvidia-device-plugin",
        "neuron-helm-chart",
        "keda",
        "aws-efa-k8s-device-plugin",
        "lws",
    }
    lws_id, lws = charts["lws"]
    props = lws["Properties"]
    assert (props["Version"], props["Repository"], props["Namespace"]) == (
        versions.LWS.version,
        versions.LWS.repository,
        "lws-system",
    )
    assert props["Wait"] is True
    server = next(
        (lid, r)
        for lid, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "LeaderWorkerSet" in json.dumps(r["Properties"])
    )
    group = next(lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Nodegroup" and "ChatPp" in lid)
    assert {lws_id, group} <= set(server[1]["DependsOn"])
    # the chat-pp nodes carry their EFA interface (launch template) in one subnet and a cluster placement group
    nodegroup = resources[group]["Properties"]
    assert len(nodegroup["Subnets"]) == 1
    templates = [r for r in resources.values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert any(
        any(i.get("InterfaceType") == "efa" for i in t["Properties"]["LaunchTemplateData"].get("NetworkInterfaces", []))
        for t in templates
    )
    assert sum(1 for r in resources.values() if r["Type"] == "AWS::EC2::PlacementGroup") == 1


def test_access_reads_the_leader_and_worker_pods_of_a_leader_worker_set(manifests: list[dict[str, Any]]) -> None:
    # `mlstack access` follows the images and the API-key secret of the pods the stack applies: a multi-node
    # endpoint's pods are in the LeaderWorkerSet's templates, not in a Deployment.
    lws = _named(manifests, "LeaderWorkerSet", "vllm-chat-pp")
    leader, worker = pod_specs(lws)
    assert leader["initContainers"][0]["env"][0]["name"] == "SECRET_ARN"
    assert worker["containers"][0]["image"].startswith("763104351884.dkr.ecr.")
    assert pod_specs({"kind": "Service", "spec": {}}) == []


def test_the_leader_waits_for_every_ray_node_then_serves_and_workers_retry_the_head(tmp_path: Path) -> None:
    # The scripts run under /bin/sh with stand-ins for `ray`, `python3` (the node count Ray reports: 1, then 2)
    # and `vllm`, as LeaderWorkerSet starts them (LWS_GROUP_SIZE / LWS_LEADER_ADDRESS set).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stubs = {
        "ray": f'echo "ray $*" >> {log}; '
        f'if [ "$1" = start ] && [ -n "$FAIL_ONCE" ] && [ ! -e {tmp_path}/failed ]; then '
        f"touch {tmp_path}/failed; exit 1; fi",
        "python3": f"n=$(cat {tmp_path}/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > {tmp_path}/n; echo $n",
        "vllm": f'echo "vllm $*" >> {log}',
        "sleep": "true",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "l"}
    script = leader_script('exec vllm serve "$@"')
    subprocess.run(["/bin/sh", "-c", script, "--", "/models", "--pipeline-parallel-size", "2"], env=env, check=True)
    lines = log.read_text().splitlines()
    assert lines == [
        f"ray start --head --port=6379 --include-dashboard=false --disable-usage-stats --object-store-memory={STORE}",
        "vllm serve /models --pipeline-parallel-size 2",
    ]
    assert (tmp_path / "n").read_text().strip() == "2"  # asked twice: 1 node, then both
    log.unlink()
    subprocess.run(["/bin/sh", "-c", worker_script()], env={**env, "FAIL_ONCE": "1"}, check=True)
    assert (
        log.read_text().splitlines()
        == [f"ray start --address=l:6379 --disable-usage-stats --object-store-memory={STORE} --block"] * 2
    )
    # A Ray head that does not start ends the leader (LWS restarts the group), never reaching `vllm serve`.
    log.unlink()
    (tmp_path / "failed").unlink()
    run = subprocess.run(["/bin/sh", "-c", script, "--", "/models"], env={**env, "FAIL_ONCE": "1"}, check=False)
    assert run.returncode == 1
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["ray"]


def test_the_ray_object_store_fits_in_dev_shm() -> None:
    # Ray keeps its object store in /dev/shm; past its size Ray falls back to /tmp (disk).
    assert 0 < RAY_OBJECT_STORE_BYTES <= SHM_GIB * 1024**3 // 2
    assert leader_script("x").count(f"--object-store-memory={RAY_OBJECT_STORE_BYTES}") == 1
    assert worker_script().count(f"--object-store-memory={RAY_OBJECT_STORE_BYTES}") == 1
