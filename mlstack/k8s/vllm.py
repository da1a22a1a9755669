"""Kubernetes manifests of an EKS vLLM endpoint (no CDK import): the weights volume, the server Deployment, its
internal load balancer Service and its KEDA ScaledObject.

- Weights: a static Mountpoint for Amazon S3 CSI volume (driver `s3.csi.aws.com`) over the model prefix, mounted
  read-only. CSI driver v2 runs one Mountpoint Pod per node and volume, shared by the pods there that mount it,
  with a data cache in that Pod's emptyDir (`cache: emptyDir`; Mountpoint CSI driver docs, "Caching
  configuration"). The cache lives only as long as that Mountpoint Pod: once no pod on the node mounts the volume,
  the driver unmounts and ends it (docs/MOUNTPOINT_POD_SHARING.md), so with one server per node a restart or a
  rollout reads the weights from S3 again; only servers that share a node at the same time share the cache.
  The PV and PVC names carry a hash of the PV's spec (immutable once created): a changed prefix, bucket or cache
  size makes a new pair, the Deployment's claim follows (a rollout) and the provider's prune removes the old one.
- Server: `vllm serve` with the flags of `mlstack.design.serving_eks.ServerDesign.vllm_args`. An init container
  (the AWS CLI image, pinned by digest) reads the API key from Secrets Manager with the pod's EKS Pod Identity role
  into an in-memory volume; the server exports it as `VLLM_API_KEY` (vLLM's environment form of `--api-key`, so
  the key is not in the process's command line), checked on every /v1 route (its /health and /metrics stay open
  for the kubelet and KEDA). Startup, readiness and liveness probes on /health; a preStop drain
  (`mlstack.k8s.serving_drain`).
- Service: `type: LoadBalancer` with the in-tree AWS cloud provider's internal NLB annotations (EKS runs the AWS
  cloud controller; "Route TCP and UDP traffic with Network Load Balancers", EKS User Guide), reachable from the
  VPC CIDR only (`loadBalancerSourceRanges`).
- ScaledObject: KEDA's `metrics-api` scaler in `prometheus` format reads `vllm:num_requests_waiting` of the
  endpoint's model from every ready server behind the endpoint's own Service (`aggregateFromKubeServiceEndpoints`,
  summed; KEDA >= 2.19, kedacore/keda PR #6565, and >= 2.20.0 for the EndpointSlices of that Service only,
  kedacore/keda #7641), so the HPA it drives keeps `sum / replicas` at the target. Scale-in waits for
  `SCALE_IN_WINDOW_S` of lower readings (HPA `behavior.scaleDown.stabilizationWindowSeconds`; KEDA's
  `cooldownPeriod` applies only to scaling to zero, KEDA docs "Scaling Deployments").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mlstack.design.serving_eks import API_KEY_FILE, MODEL_DIR, PORT, SERVICE_ACCOUNT, ServerDesign, api_service_name
from mlstack.design.serving_neuron import COMPILED_DIR, neuron_env
from mlstack.k8s.kube import GPU_TAINT, LABEL_PREFIX, NEURON_TAINT
from mlstack.k8s.serving_drain import drain_lifecycle, termination_grace_seconds

__all__ = [
    "AWS_CLI_IMAGE",
    "WEIGHTS_CLAIM",
    "namespace_manifests",
    "scaled_object",
    "server_deployment",
    "server_service",
    "weights_volume",
]

AWS_CLI_IMAGE = (
    "public.ecr.aws/aws-cli/aws-cli:2.27.26@sha256:ce3aee116adc8e9ba7ad27295102eb1c9c91525fbad18f45ee7a9bfd01cfec73"
)
"""The init container that fetches the API key (AWS CLI v2 reads EKS Pod Identity credentials); tag and digest as
a public Helm chart pins them (an `aws-sts-init-container` template found with the search tool)."""
WEIGHTS_CLAIM = "model-weights"
MOUNTPOINT_DRIVER = "s3.csi.aws.com"
SCALE_IN_WINDOW_S = 600
"""A new server takes minutes to load: remove one only after 10 minutes of readings that allow it."""
SHM_GIB = 16
"""/dev/shm for the tensor-parallel workers' shared-memory transport (NCCL and vLLM's own broadcast)."""


def _labels(endpoint: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": endpoint}


def namespace_manifests(namespace: str) -> list[dict[str, Any]]:
    """The serving namespace and the servers' service account (its Pod Identity association is in the stack; the
    pods mount no Kubernetes API token: the servers never call the API server)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace},
            "automountServiceAccountToken": False,
        },
    ]


def weights_volume(
    *,
    namespace: str,
    bucket: str,
    prefix: str,
    region: str,
    cache_gib: int,
    endpoint: str,
    bucket_key: str | None = None,
) -> list[dict[str, Any]]:
    """A read-only PersistentVolume over `s3://bucket/prefix` and the claim bound to it (one per endpoint: a PV
    binds one claim), both named `...-<hash>` after what the PV's spec holds (`bucket_key`, default `bucket`:
    what stands for the bucket in the hash when its name is only known at deploy time)."""
    spec = {"bucket": bucket_key or bucket, "prefix": prefix, "region": region, "cache_gib": cache_gib}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    pv = f"{namespace}-{endpoint}-weights-{digest}"
    claim = f"{WEIGHTS_CLAIM}-{endpoint}-{digest}"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Ti"},  # required by the API; Mountpoint ignores it
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": claim},
                "mountOptions": ["read-only", f"region {region}", f"prefix {prefix}"],
                "csi": {
                    "driver": MOUNTPOINT_DRIVER,
                    "volumeHandle": pv,
                    "volumeAttributes": {
                        "bucketName": bucket,
                        "cache": "emptyDir",
                        "cacheEmptyDirSizeLimit": f"{cache_gib}Gi",
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Ti"}},
            },
        },
    ]


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def server_deployment(
    design: ServerDesign,
    *,
    namespace: str,
    model_name: str,
    image: str,
    secret_arn: str,
    region: str,
    startup_seconds: int,
    cpu_per_server: int,
    memory_gib_per_server: int,
    weights_claim: str,
    compile_cache_gib: int = 0,
) -> dict[str, Any]:
    """The vLLM Deployment of one endpoint on its node group (`mlstack.io/node-group: <endpoint>`), mounting the
    claim `weights_claim` (the PVC of `weights_volume`). Neuron servers request `aws.amazon.com/neuron` chips and
    write the compiled model to an emptyDir of `compile_cache_gib`."""
    labels = _labels(design.endpoint)
    fetch = (
        f'aws secretsmanager get-secret-value --region {region} --secret-id "$SECRET_ARN" --query SecretString '
        f"--output text > {API_KEY_FILE}"
    )
    # vLLM reads --api-key from VLLM_API_KEY: the key stays out of /proc/<pid>/cmdline (`ps` on the node).
    serve = f'VLLM_API_KEY="$(cat {API_KEY_FILE})"; export VLLM_API_KEY; exec vllm serve "$@"'
    neuron = design.accelerator == "neuron"
    accel = {("aws.amazon.com/neuron" if neuron else "nvidia.com/gpu"): str(design.devices_per_pod)}
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"vllm-{design.endpoint}", "namespace": namespace, "labels": labels},
        "spec": {
            # No `replicas`: KEDA's HPA owns it; a value here would reset the fleet to it on every stack update
            # (Kubernetes docs, "Horizontal Pod Autoscaling": remove spec.replicas from a manifest an HPA scales).
            "selector": {"matchLabels": labels},
            # Replace one server at a time, stopping it first: a surge server would need a free GPU, which a node
            # group sized for the servers it runs does not have (it would stay Pending and the rollout never end).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "nodeSelector": {f"{LABEL_PREFIX}/node-group": design.endpoint},
                    "tolerations": [
                        {"key": NEURON_TAINT if neuron else GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "terminationGracePeriodSeconds": termination_grace_seconds(design),
                    "initContainers": [
                        {
                            "name": "api-key",
                            "image": AWS_CLI_IMAGE,
                            "command": ["/bin/sh", "-c", fetch],
                            "env": [{"name": "SECRET_ARN", "value": secret_arn}],
                            "volumeMounts": [{"name": "api-key", "mountPath": API_KEY_FILE.rsplit("/", 1)[0]}],
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {"memory": "256Mi"},
                            },
                        }
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": image,
                            "command": ["/bin/sh", "-c", serve, "--"],
                            "args": design.vllm_args(model_name),
                            "ports": [{"name": "http", "containerPort": PORT}],
                            "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],  # weights come from the volume only
                            "lifecycle": drain_lifecycle(design),  # finish the requests before SIGTERM
                            "resources": {
                                "requests": {
                                    "cpu": str(cpu_per_server),
                                    "memory": f"{memory_gib_per_server}Gi",
                                    **accel,
                                },
                                "limits": {"memory": f"{memory_gib_per_server}Gi", **accel},
                            },
                            # Loading the weights and capturing CUDA graphs takes minutes; until then only the
                            # startup probe runs.
                            "startupProbe": _probe("/health", 10, max(6, startup_seconds // 10)),
                            "readinessProbe": _probe("/health", 10, 3),
                            "livenessProbe": _probe("/health", 30, 3),
                            "volumeMounts": [
                                {"name": "weights", "mountPath": MODEL_DIR, "readOnly": True},
                                {"name": "api-key", "mountPath": API_KEY_FILE.rsplit("/", 1)[0], "readOnly": True},
                                {"name": "shm", "mountPath": "/dev/shm"},
                            ],
                            "securityContext": {"allowPrivilegeEscalation": False},
                        }
                    ],
                    "volumes": [
                        {
                            "name": "weights",
                            "persistentVolumeClaim": {
                                "claimName": weights_claim,
                                "readOnly": True,
                            },
                        },
                        {"name": "api-key", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_GIB}Gi"}},
                    ],
                },
            },
        },
    }
    if neuron:
        _compile_cache(deployment["spec"]["template"]["spec"], compile_cache_gib)
    return deployment


def _compile_cache(pod: dict[str, Any], size_gib: int) -> None:
    """Neuron: the compiled model goes to a writable emptyDir on the node's disk (`serving_neuron.COMPILED_DIR`)."""
    container = pod["containers"][0]
    container["env"] += neuron_env()
    container["volumeMounts"].append({"name": "neuron-cache", "mountPath": COMPILED_DIR.rsplit("/", 1)[0]})
    pod["volumes"].append({"name": "neuron-cache", "emptyDir": {"sizeLimit": f"{size_gib}Gi"}})


def server_service(design: ServerDesign, *, namespace: str, vpc_cidr: str) -> dict[str, Any]:
    """An internal Network Load Balancer in front of the endpoint's servers, open to the VPC only."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": api_service_name(design.endpoint),
            "namespace": namespace,
            "labels": _labels(design.endpoint),
            "annotations": {
                "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
            },
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": _labels(design.endpoint),
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
            "loadBalancerSourceRanges": [vpc_cidr],
        },
    }


def scaled_object(design: ServerDesign, *, namespace: str, model_name: str) -> dict[str, Any]:
    """KEDA ScaledObject: replicas between the endpoint's bounds, one more per `target_requests_waiting` waiting.
    The URL names the endpoint's own Service (KEDA reads the servers of its EndpointSlices) and the metric is the
    served model's (`model_name` label of vLLM's metrics)."""
    name = f"vllm-{design.endpoint}"
    service = api_service_name(design.endpoint)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": (
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
                if design.pipeline_parallel == 1
                else {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name}
            ),
            "minReplicaCount": design.min_replicas,
            "maxReplicaCount": design.max_replicas,
            "pollingInterval": 15,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_IN_WINDOW_S}}
                }
            },
            "triggers": [
                {
                    "type": "metrics-api",
                    "metricType": "AverageValue",
                    "metadata": {
                        "url": f"http://{service}.{namespace}.svc.cluster.local:{PORT}/metrics",
                        "format": "prometheus",
                        "valueLocation": f'vllm:num_requests_waiting{{model_name="{model_name}"}}',
                        "aggregateFromKubeServiceEndpoints": "true",
                        "aggregationType": "sum",
                        "targetValue": f"{design.target_requests_waiting:g}",
                    },
                }
            ],
        },
    }
