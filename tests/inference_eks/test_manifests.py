"""The serving manifests, as the stack applies them, validate against the Kubernetes 1.35 OpenAPI schemas
(kubernetes-validate, strict: no unknown fields), and say what the first request needs."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from mlstack.access.cli import stacks_of
from mlstack.config import load
from mlstack.design.serving_eks import API_KEY_FILE, server_designs
from mlstack.k8s.vllm import AWS_CLI_IMAGE
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
            "Service",
            "ScaledObject",
        ]
    )
    for manifest in manifests:
        if manifest["apiVersion"].startswith("keda.sh/"):
            continue  # a CRD: no schema in the Kubernetes OpenAPI; checked field by field below
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
    assert "@sha256:" in server["image"]
    assert f'--api-key "$(cat {API_KEY_FILE})"' in server["command"][2]
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


def test_the_weights_volume_is_a_read_only_mountpoint_mount_of_the_prefix(manifests: list[dict[str, Any]]) -> None:
    pv = _kind(manifests, "PersistentVolume")["spec"]
    assert pv["csi"]["driver"] == "s3.csi.aws.com" and pv["accessModes"] == ["ReadOnlyMany"]
    assert "read-only" in pv["mountOptions"] and "prefix llama-3-1-8b-instruct/" in pv["mountOptions"]
    assert pv["csi"]["volumeAttributes"]["bucketName"].startswith("eks-llm-serving-inferencestack-modelbucket")
    assert pv["csi"]["volumeAttributes"]["cache"] == "emptyDir"  # node-local: a restart reads no S3 again


def test_the_service_is_an_internal_nlb_open_to_the_vpc_only(manifests: list[dict[str, Any]]) -> None:
    service = _kind(manifests, "Service")
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-type"] == "nlb"
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.30.0.0/16"]


def test_keda_scales_on_the_summed_queue_depth_of_every_server(manifests: list[dict[str, Any]]) -> None:
    spec = _kind(manifests, "ScaledObject")["spec"]
    design = server_designs(load(NAME).inference_eks)[0]  # type: ignore[arg-type]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (design.min_replicas, design.max_replicas)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["url"] == "http://vllm-chat.serving.svc.cluster.local:8000/metrics"
    assert (meta["format"], meta["valueLocation"]) == ("prometheus", "vllm:num_requests_waiting")
    assert (meta["aggregateFromKubeServiceEndpoints"], meta["aggregationType"]) == ("true", "sum")
    assert meta["targetValue"] == "4"
    assert spec["scaleTargetRef"]["name"] == _kind(manifests, "Deployment")["metadata"]["name"]


def test_a_rollout_stops_a_server_before_it_starts_one(manifests: list[dict[str, Any]]) -> None:
    # A surge server would need a GPU the node group does not have: it would stay Pending, the rollout never end.
    strategy = _kind(manifests, "Deployment")["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
