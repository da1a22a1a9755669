"""The serving manifests, as the stack applies them, validate against the Kubernetes 1.35 OpenAPI schemas
(kubernetes-validate, strict: no unknown fields), and say what the first request needs."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from mlstack.access.cli import stacks_of
from mlstack.config import load
from mlstack.constructs.training import versions
from mlstack.design.serving_eks import API_KEY_FILE, server_designs
from mlstack.k8s.vllm import AWS_CLI_IMAGE, weights_volume
from tests.synth import Session

NAME = "eks-llm-serving"
K8S_VERSION = "1.35.0"


@pytest.fixture(scope="module")
def manifests(session: Session) -> list[dict[str, Any]]:
    if NAME not in session.blueprints:
        pytest.skip(f"{NAME} not selected by MLSTACK_TEST_BLUEPRINTS")
    bp = session.blueprints[NAME]
    stacks = stacks_of(bp)
    stack = next(s for s in stacks.templates if s.endswith("-InferenceStack"))
    found: list[dict[str, Any]] = []
    for resource in stacks.resources(stack).values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            found += json.loads(stacks.text(stack, resource["Properties"]["Manifest"]))
    return found


def _kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind)


def test_every_core_manifest_validates_against_the_kubernetes_schema(manifests: list[dict[str, Any]]) -> None:
    kinds = sorted(m["kind"] for m in manifests)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ScaledObject",
            "EC2NodeClass",
            "NodePool",
        ]
    )
    for manifest in manifests:
        if manifest["apiVersion"].startswith(("keda.sh/", "karpenter.")):
            continue  # CRDs: no schema in the Kubernetes OpenAPI; KEDA field by field below, Karpenter's in test_pools
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_a_broken_manifest_fails_the_same_validation() -> None:
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prts": []}},
            K8S_VERSION,
            strict=True,
        )


def test_the_server_reads_the_key_serves_the_weights_and_probes_health(manifests: list[dict[str, Any]]) -> None:
    pod = _kind(manifests, "Deployment")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == AWS_CLI_IMAGE and "@sha256:" in AWS_CLI_IMAGE
    assert "aws secretsmanager get-secret-value" in init["command"][2] and API_KEY_FILE in init["command"][2]
    assert init["env"][0]["value"].startswith("arn:aws:secretsmanager:us-east-1:")
    (server,) = pod["containers"]
    # The AWS Deep Learning Containers vLLM image, from ECR in the stack's region (its ECR endpoints), not Docker Hub.
    assert server["image"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.14.0-gpu-py312-cu129-ubuntu22.04-ec2"
    # The key reaches vLLM as VLLM_API_KEY, never as an argument (/proc/<pid>/cmdline is readable on the node).
    assert server["command"][2].startswith(f'VLLM_API_KEY="$(cat {API_KEY_FILE})"; export VLLM_API_KEY; exec vllm')
    assert "--api-key" not in server["command"][2] and "--api-key" not in server["args"]
    args = server["args"]
    assert args[0] == "/models" and args[args.index("--served-model-name") + 1] == "llama-3.1-8b-instruct"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": 8000}
    # Weights load before readiness counts: the startup probe allows minutes, the others take over after.
    assert server["startupProbe"]["periodSeconds"] * server["startupProbe"]["failureThreshold"] >= 300
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"mlstack.io/node-group": "chat"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    weights = next(v for v in pod["volumes"] if v["name"] == "weights")
    assert weights["persistentVolumeClaim"]["readOnly"] is True
    assert (
        weights["persistentVolumeClaim"]["claimName"] == _kind(manifests, "PersistentVolumeClaim")["metadata"]["name"]
    )


def test_the_weights_volume_is_a_read_only_mountpoint_mount_of_the_prefix(manifests: list[dict[str, Any]]) -> None:
    pv = _kind(manifests, "PersistentVolume")["spec"]
    assert pv["csi"]["driver"] == "s3.csi.aws.com" and pv["accessModes"] == ["ReadOnlyMany"]
    assert "read-only" in pv["mountOptions"] and "prefix llama-3-1-8b-instruct/" in pv["mountOptions"]
    assert pv["csi"]["volumeAttributes"]["bucketName"].startswith("eks-llm-serving-inferencestack-modelbucket")
    assert pv["csi"]["volumeAttributes"]["cache"] == "emptyDir"  # in the node's Mountpoint Pod, while it runs


def test_a_changed_weights_volume_is_a_new_pv_and_claim(manifests: list[dict[str, Any]]) -> None:
    # A PV's spec is immutable: an apply that changes it in place fails the stack update. Every input of the spec
    # names a new pair, the same inputs the same pair (no rollout without a change).
    base: dict[str, Any] = {
        "namespace": "serving",
        "bucket": "b",
        "prefix": "m/",
        "region": "us-east-1",
        "cache_gib": 19,
    }
    pv, claim = weights_volume(endpoint="chat", **base)
    assert (
        pv["spec"]["claimRef"]["name"] == claim["metadata"]["name"]
        and claim["spec"]["volumeName"] == pv["metadata"]["name"]
    )
    assert pv["spec"]["csi"]["volumeHandle"] == pv["metadata"]["name"]
    names = {(pv["metadata"]["name"], claim["metadata"]["name"])}
    for key, value in (("bucket", "c"), ("prefix", "n/"), ("region", "us-west-2"), ("cache_gib", 20)):
        other_pv, other_claim = weights_volume(endpoint="chat", **{**base, key: value})
        names.add((other_pv["metadata"]["name"], other_claim["metadata"]["name"]))
    assert len(names) == 5 and len({n for pair in names for n in pair}) == 10
    again, _ = weights_volume(endpoint="chat", **base)
    assert again["metadata"]["name"] == pv["metadata"]["name"]
    # A bucket known only at deploy time is hashed by what stands for it (the stack passes its logical ID).
    token, _ = weights_volume(endpoint="chat", **{**base, "bucket": "${Token[X]}"}, bucket_key="b")
    assert token["metadata"]["name"] == pv["metadata"]["name"]
    applied = _kind(manifests, "PersistentVolume")["metadata"]["name"]
    assert applied.startswith("serving-chat-weights-") and len(applied) == len("serving-chat-weights-") + 8


def test_the_service_is_an_internal_nlb_open_to_the_vpc_only(manifests: list[dict[str, Any]]) -> None:
    service = _kind(manifests, "Service")
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-type"] == "nlb"
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.30.0.0/16"]


def test_keda_scales_on_the_summed_queue_depth_of_every_server(manifests: list[dict[str, Any]]) -> None:
    # aggregateFromKubeServiceEndpoints/aggregationType exist from KEDA 2.19 (PR #6565); before 2.20.0 the
    # EndpointSlice selector was empty and summed every Service of the namespace (#7641).
    assert tuple(int(p) for p in versions.KEDA.version.split(".")) >= (2, 20, 2)
    assert "2.17" not in versions.KEDA.source
    spec = _kind(manifests, "ScaledObject")["spec"]
    design = server_designs(load(NAME).inference_eks)[0]  # type: ignore[arg-type]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (design.min_replicas, design.max_replicas)
    trigger, running = spec["triggers"]  # the running-requests trigger: tests/inference_eks/test_autoscaling.py
    assert running["metadata"]["valueLocation"].startswith("vllm:num_requests_running")
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["url"] == "http://vllm-chat-api.serving.svc.cluster.local:8000/metrics"
    # The endpoint's own Service (KEDA reads its EndpointSlices) and the served model's series only.
    assert meta["format"] == "prometheus"
    assert meta["valueLocation"] == 'vllm:num_requests_waiting{model_name="llama-3.1-8b-instruct"}'
    assert (meta["aggregateFromKubeServiceEndpoints"], meta["aggregationType"]) == ("true", "sum")
    assert meta["targetValue"] == "4"
    assert spec["scaleTargetRef"]["name"] == _kind(manifests, "Deployment")["metadata"]["name"]
    service = _kind(manifests, "Service")
    assert service["metadata"]["name"] == "vllm-chat-api" and service["spec"]["selector"] == {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": "chat",
    }
    # Scale-in waits 10 minutes through the HPA's behavior; KEDA's cooldownPeriod only governs scaling to zero.
    assert "cooldownPeriod" not in spec
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == {"scaleDown": {"stabilizationWindowSeconds": 600}}


def test_a_rollout_stops_a_server_before_it_starts_one(manifests: list[dict[str, Any]]) -> None:
    # A surge server would need a GPU the node group does not have: it would stay Pending, the rollout never end.
    strategy = _kind(manifests, "Deployment")["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
