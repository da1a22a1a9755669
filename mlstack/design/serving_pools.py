"""Node autoscaling of the EKS serving endpoints (`inference.capacity_manager: karpenter`), without the CDK: one
Karpenter pool per endpoint (the training layer's `Pool`, its controller and manifests reused), how a server drains
before it stops, and what a scale-from-zero costs in time.

- Pool: the endpoint's instance type in every zone of the network, on-demand unless `inference.karpenter` adds
  Spot, the GPU taint the servers tolerate and the `mlstack.io/node-group: <endpoint>` label they select, and a
  limit of `ceil(max_replicas / servers per node)` nodes' GPUs: Karpenter launches no node past it (Karpenter docs,
  NodePools: limits), so it is the endpoint's cost cap. Disruption is the serving one
  (`mlstack.k8s.serving_pools`): consolidation `WhenEmptyOrUnderutilized` and drift replacement, one node at a time;
  with fewer than two servers drift is blocked (`blocks_drift`): the AMI alias `al2023@latest` marks every node
  Drifted at each EKS AMI release, and replacing the only server's node would be an outage of minutes at an hour
  nobody chose (the training pools block it too, `mlstack.design.karpenter`). New nodes get the new AMI.
- Drain: vLLM 0.14 ends its in-flight requests on SIGTERM (its engine stops before the HTTP server waits for
  connections; the wait for them, `--shutdown-timeout`, came after 0.14: vllm-project/vllm PR #36666). So each
  server's preStop hook first waits `DRAIN_DELAY_S` for the Service to drop the terminating pod, then until vLLM
  reports no running or waiting request, at most `drain_seconds` (one longest request: max-model-len tokens at the
  time per output token, plus the first token), before the kubelet sends SIGTERM. That holds for every way a
  server stops: KEDA's scale-in, a rollout, Karpenter consolidating or replacing a node (an eviction), a node
  group update.
- Cold start (scale from zero, or a server on a new node): node launch and join, the image pull, the weights read
  through Mountpoint, CUDA graph capture (on Neuron the model's compilation; over several nodes the workers' start).
  The startup probe allows `server_startup_seconds`; the plan prints both.
- Neuron endpoints get pools like GPU ones: the Neuron taint, limits in `aws.amazon.com/neuron` chips. A server over
  several nodes does not (the config rejects it: its nodes need EFA in one placement group).
"""

from __future__ import annotations

import math

from mlstack.catalog import get_instance
from mlstack.config.inference_eks import EksInferenceConfig
from mlstack.config.inference_eks_pools import ServingKarpenterConfig
from mlstack.design.karpenter import Pool
from mlstack.design.serving_eks import ServerDesign, server_designs
from mlstack.design.serving_multinode import MULTINODE_START_S
from mlstack.design.serving_neuron import COMPILE_BUDGET_S
from mlstack.k8s.kube import LABEL_PREFIX, accelerator_resource, accelerator_taint_key

__all__ = [
    "DEFAULT_TPOT_MS",
    "DRAIN_DELAY_S",
    "NODE_LAUNCH_S",
    "blocks_drift",
    "drain_seconds",
    "server_startup_seconds",
    "serving_pools",
    "startup_seconds",
    "termination_grace_seconds",
]

DRAIN_DELAY_S = 15
"""Seconds the preStop hook waits before it reads the server's queue: the endpoint controller removes the
terminating pod from the Service's EndpointSlices and kube-proxy on every node stops sending it new connections
(Kubernetes docs, "Pod Lifecycle: Termination of Pods")."""
DEFAULT_TPOT_MS = 60.0
"""Time per output token assumed where the serving model gives none (an 8B model at 16 sequences on one L40S:
58 ms estimated)."""
MAX_DRAIN_S = 900
NODE_LAUNCH_S = 180
"""Order of magnitude for an EC2 GPU instance to boot the EKS AL2023 NVIDIA AMI and join (kubelet ready, device
plugin registered); an estimate for the plan's cold-start line, not a measured value."""


def blocks_drift(design: ServerDesign) -> bool:
    """Whether the endpoint's pool keeps its nodes when they drift (a budget of 0 nodes for `Drifted`): with fewer
    than two servers a drift replacement stops the only one."""
    return design.min_replicas < 2


def startup_seconds(weights_gib: float) -> int:
    """The startup probe's budget: image pull and start (300 s) plus 10 s per GiB of weights read through
    Mountpoint and loaded onto the GPUs."""
    return int(300 + 10 * weights_gib)


def server_startup_seconds(design: ServerDesign, weights_gib: float) -> int:
    """`startup_seconds` plus the first compilation on Neuron and, over several nodes, the workers' image pull and
    Ray join, which the leader waits for."""
    return (
        startup_seconds(weights_gib)
        + (COMPILE_BUDGET_S if design.accelerator == "neuron" else 0)
        + (MULTINODE_START_S if design.pipeline_parallel > 1 else 0)
    )


def drain_seconds(design: ServerDesign) -> int:
    """Longest the preStop hook waits for requests to finish: one request of max-model-len tokens at the time per
    output token (and its first token), between 60 s and `MAX_DRAIN_S`."""
    figures = design.figures
    tpot = figures.tpot_ms if figures is not None and figures.tpot_ms else DEFAULT_TPOT_MS
    ttft = figures.ttft_ms if figures is not None and figures.ttft_ms else 0.0
    return max(60, min(MAX_DRAIN_S, math.ceil((ttft + design.max_model_len * tpot) / 1000)))


def termination_grace_seconds(design: ServerDesign) -> int:
    """The pod's terminationGracePeriodSeconds: the delay, the drain, and 15 s for vLLM to exit after SIGTERM (the
    kubelet's grace period counts from the start of preStop)."""
    return DRAIN_DELAY_S + drain_seconds(design) + 15


def _pool(
    config: EksInferenceConfig, settings: ServingKarpenterConfig, design: ServerDesign, zones: tuple[str, ...]
) -> Pool:
    spec = next(e for e in config.endpoints if e.name == design.endpoint)
    it = get_instance(design.instance_type)
    assert it.accelerator is not None  # GPU or Neuron: taint, resource and labels follow the accelerator's kind
    taint = accelerator_taint_key(it)
    kinds = tuple(settings.capacity_types)
    return Pool(
        name=design.endpoint,
        instance_types=(it.name,),
        zones=zones,
        capacity_types=kinds,
        efa=False,
        interfaces=None,
        accelerator_resource=accelerator_resource(it),
        accelerators_per_node=it.accelerator.count,
        max_nodes=design.max_nodes,
        taints=(taint,) if taint else (),
        labels={
            f"{LABEL_PREFIX}/node-group": design.endpoint,
            f"{LABEL_PREFIX}/capacity": "spot" if "spot" in kinds else "on-demand",
            f"{LABEL_PREFIX}/efa-interfaces": "0",
            f"{LABEL_PREFIX}/accelerator-kind": it.accelerator.kind,
            f"{LABEL_PREFIX}/accelerator": it.accelerator.model,
            f"{LABEL_PREFIX}/accelerator-count": str(it.accelerator.count),
        },
        reservation_id=None,
        capacity_kind="spot" if "spot" in kinds else "on_demand",
        placement_group=False,
        consolidate_after=f"{settings.consolidate_after_minutes}m",
        termination_grace_period=f"{settings.termination_grace_period_minutes}m",
        root_volume_gib=spec.root_volume_gib,
    )


def serving_pools(config: EksInferenceConfig, zones: tuple[str, ...] | list[str]) -> list[Pool]:
    """One pool per endpoint, in blueprint order, over `zones` (the network's); empty with fixed node groups."""
    if config.capacity_manager != "karpenter":
        return []
    settings = config.karpenter or ServingKarpenterConfig()
    return [_pool(config, settings, design, tuple(zones)) for design in server_designs(config)]
