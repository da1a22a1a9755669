"""What an `inference: {engine: eks}` section implies, without the CDK: per endpoint the vLLM server layout and
flags, the node group size, and the serving figures; the names the stack, the manifests and the plan share.

Sizing rules (each from the memory and serving models `mlstack advise --task infer` uses):
- tensor-parallel size: the blueprint's, else the degree with the most output tokens/s per instance among those
  that divide the GPUs and attention heads and fit (`mlstack.design.serving.replica_layout`); one server per
  `tensor_parallel` GPUs, `gpus // tensor_parallel` servers per node;
- `--max-model-len` = prompt + output tokens of `traffic.tokens`; `--max-num-seqs` = its concurrency;
- `--gpu-memory-utilization` = (weights + KV cache of max-num-seqs sequences of max-model-len tokens) per GPU over
  the GPU's memory, plus `ACTIVATION_RESERVE` for activations and the sampler, at most `MAX_UTILIZATION`: vLLM
  preallocates its KV cache from what this fraction leaves after the weights, so the fraction is what bounds the
  cache to the workload's size while leaving the rest of the GPU to CUDA graphs and NCCL buffers;
- nodes: `ceil(min_replicas / servers per node)` to `ceil(max_replicas / servers per node)`, each x the nodes one
  server spans; a fixed node group keeps the first (the config holds max_replicas to what it holds), a Karpenter
  pool launches up to the second (`mlstack.design.serving_pools`; single-node servers only);
- layout (`mlstack.design.serving_layout`): a server over several nodes when one node cannot hold the model
  (`--pipeline-parallel-size` = nodes, `mlstack.design.serving_multinode`); on Neuron the degree counts
  NeuronCores and the flags are `mlstack.design.serving_neuron`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB
from mlstack.config.inference_eks import EksEndpointConfig, EksInferenceConfig
from mlstack.design.serving import ServingFigures
from mlstack.design.serving_multinode import multinode_args
from mlstack.design.serving_neuron import neuron_args

__all__ = [
    "ACTIVATION_RESERVE",
    "API_KEY_FILE",
    "MAX_UTILIZATION",
    "PORT",
    "SERVICE_ACCOUNT",
    "Part",
    "ServerDesign",
    "api_service_name",
    "server_designs",
    "serving_cluster_name",
]

ACTIVATION_RESERVE = 0.08
MAX_UTILIZATION = 0.92
PORT = 8000
"""vLLM's default HTTP port (the OpenAI API, /health and /metrics)."""
SERVICE_ACCOUNT = "vllm"
"""The servers' service account: its Pod Identity role reads the API key secret (nothing else)."""
API_KEY_FILE = "/run/vllm/api-key"
"""Where the init container writes the API key for the server (an in-memory emptyDir)."""
MODEL_DIR = "/models"
"""Where the weights prefix is mounted read-only in the server container."""


def api_service_name(endpoint: str) -> str:
    """The endpoint's API Service (its NLB): `vllm-<endpoint>-api`, never the server's own name `vllm-<endpoint>`,
    which a LeaderWorkerSet gives its headless Service (LWS creates a Service named after the set and adopts one
    that exists by that name without checking it is headless: kubernetes-sigs/lws
    pkg/utils/controller/controller_utils.go, CreateHeadlessServiceIfNotExists)."""
    return f"vllm-{endpoint}-api"


def serving_cluster_name(blueprint: str) -> str:
    """The serving cluster's fixed name (its control-plane log group is named after it before it exists); not the
    training cluster's `<name>-cluster`, so a blueprint could hold both."""
    return f"{blueprint}-serving"


@dataclass(frozen=True)
class ServerDesign:
    """One endpoint's vLLM fleet."""

    endpoint: str
    instance_type: str
    gpus_per_node: int
    tensor_parallel: int
    servers_per_node: int
    min_replicas: int
    max_replicas: int
    min_nodes: int
    max_nodes: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    need_gib_per_gpu: float
    gpu_gib: float
    target_requests_waiting: float
    figures: ServingFigures | None
    accelerator: str = "gpu"
    """`gpu` or `neuron` (`mlstack.design.serving_layout`)."""
    devices_per_pod: int = 1
    """GPUs or Neuron chips each server pod requests."""
    pipeline_parallel: int = 1
    """Nodes one server spans (> 1: a LeaderWorkerSet of that many pods, `mlstack.k8s.vllm_multinode`)."""

    def vllm_args(self, model_name: str) -> list[str]:
        """The server's command-line flags (besides the API key, read from its file at start)."""
        if self.accelerator == "neuron":
            return [*self._common_args(model_name), *neuron_args(self.max_num_seqs)]
        extra = [] if self.pipeline_parallel == 1 else multinode_args(self.pipeline_parallel)
        return [
            *self._common_args(model_name),
            "--gpu-memory-utilization",
            f"{self.gpu_memory_utilization:.2f}",
            *extra,
        ]

    def _common_args(self, model_name: str) -> list[str]:
        return [
            MODEL_DIR,
            "--served-model-name",
            model_name,
            "--host",
            "0.0.0.0",
            "--port",
            str(PORT),
            "--tensor-parallel-size",
            str(self.tensor_parallel),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
        ]


def _design(config: EksInferenceConfig, endpoint: EksEndpointConfig) -> ServerDesign:
    model = config.model
    it = get_instance(endpoint.instance_type)
    assert it.accelerator is not None
    layout = endpoint.layout(model)  # the config validator rejected every layout error first
    need = layout.need_bytes_per_device
    device = layout.device_bytes
    servers = layout.servers_per_node
    scaling = endpoint.autoscaling
    hosts = math.ceil(scaling.min_replicas / servers)  # nodes (groups of nodes when a server spans several)
    top = scaling.max_replicas or hosts * servers
    tokens = endpoint.tokens
    utilization = min(MAX_UTILIZATION, math.ceil((need / device + ACTIVATION_RESERVE) * 100) / 100)
    return ServerDesign(
        endpoint=endpoint.name,
        instance_type=it.name,
        gpus_per_node=it.accelerator.count,
        tensor_parallel=layout.tensor_parallel,
        servers_per_node=servers,
        min_replicas=scaling.min_replicas,
        max_replicas=top,
        min_nodes=hosts * layout.nodes,
        max_nodes=math.ceil(top / servers) * layout.nodes,
        max_model_len=tokens.context_tokens + tokens.output_tokens,
        max_num_seqs=tokens.concurrency,
        gpu_memory_utilization=utilization,
        need_gib_per_gpu=need / GIB,
        gpu_gib=it.accelerator.memory_gib,
        target_requests_waiting=scaling.target_requests_waiting,
        figures=layout.figures,
        accelerator=layout.kind,
        devices_per_pod=layout.devices_per_pod,
        pipeline_parallel=layout.nodes,
    )


def server_designs(config: EksInferenceConfig) -> list[ServerDesign]:
    """Every endpoint's design, in blueprint order (raises ValueError for an explicit TP that does not fit)."""
    return [_design(config, e) for e in config.endpoints]


@dataclass(frozen=True)
class Part:
    """One CloudFormation resource type the InferenceStack of `engine: eks` creates, how many, and why."""

    cfn_type: str
    count: int
    what: str


def stack_parts(config: EksInferenceConfig) -> list[Part]:
    """Every resource of the stack by CloudFormation type: the plan's rows and the stack's footprint
    (`mlstack.design.footprint`, which tests/plan/test_footprint.py holds equal to the synthesized template)."""
    n = len(config.endpoints)
    groups = 0 if config.capacity_manager == "karpenter" else n  # pools instead: `footprint.inference` adds them
    admin = 1 if config.cluster.admin_host else 0
    admins = len(config.cluster.admin_principal_arns)
    designs = server_designs(config)
    efa = sum(1 for d in designs if d.pipeline_parallel > 1)  # an EfaNetworking per multi-node endpoint
    kinds = {d.accelerator for d in designs}
    charts = [
        *(["NVIDIA device plugin"] if "gpu" in kinds else []),
        *(["Neuron device plugin"] if "neuron" in kinds else []),
        "KEDA",
        *(["EFA device plugin", "LeaderWorkerSet"] if efa else []),
    ]
    return [
        Part("AWS::EKS::Cluster", 1, "serving cluster (private endpoint unless asked, KMS secrets, 5 log types)"),
        Part("AWS::Logs::LogGroup", 3, "control-plane logs and the two kubectl-provider function logs (KMS)"),
        Part("AWS::Lambda::Function", 2, "kubectl provider (deploy time only)"),
        Part("AWS::Lambda::LayerVersion", 2, "kubectl and AWS CLI layers of the kubectl provider"),
        Part("AWS::SSM::Parameter", 1, "kubectl provider ready barrier (aws_eks_v2)"),
        Part("AWS::EKS::AccessEntry", 1 + admins + admin, "kubectl provider, admin principals, admin host"),
        Part(
            "AWS::EKS::Addon",
            8,
            "vpc-cni, kube-proxy, pod identity, CoreDNS, FSx CSI, node monitoring, "
            "CloudWatch observability, Mountpoint for S3 CSI",
        ),
        Part("AWS::EKS::Nodegroup", 1 + groups, "system nodes and one GPU node group per endpoint"),
        Part("AWS::EC2::LaunchTemplate", groups + admin, "GPU node groups (IMDSv2, encrypted root) and the admin host"),
        Part(
            "AWS::EC2::SecurityGroup",
            1 + admin + efa,
            "control plane (aws_eks_v2), the admin host (no inbound), EFA peers per multi-node endpoint",
        ),
        Part("AWS::EC2::SecurityGroupIngress", 2 * admin + efa, "admin host to the API server; EFA self rule"),
        Part("AWS::EC2::SecurityGroupEgress", 2 * admin + efa, "admin host to the API server; EFA self rule"),
        Part("AWS::EC2::PlacementGroup", efa, "cluster placement group per multi-node endpoint"),
        Part(
            "AWS::IAM::Role",
            8 + admin + groups,
            "cluster, kubectl provider x2, vpc-cni, CloudWatch agent, system "
            "nodes, Mountpoint driver, vLLM servers, admin host, GPU nodes per endpoint",
        ),
        Part(
            "AWS::IAM::Policy",
            4 + admin,
            "kubectl provider x2, Mountpoint (weights prefix), servers (API key), admin host",
        ),
        Part("AWS::IAM::InstanceProfile", admin, "admin host"),
        Part("AWS::EC2::Instance", admin, "admin host (SSM only, kubectl)"),
        Part("AWS::EKS::PodIdentityAssociation", 3, "CloudWatch agent, Mountpoint driver, vLLM servers"),
        Part("AWS::S3::Bucket", 2, "model weights (project key, TLS only, versioned, logged) and its access logs"),
        Part("AWS::S3::BucketPolicy", 2, "TLS only"),
        Part("AWS::SecretsManager::Secret", 1, "API key (project key)"),
        Part("Custom::AWSCDK-EKS-HelmChart", len(charts), ", ".join(charts)),
        Part(
            "Custom::AWSCDK-EKS-KubernetesResource",
            1 + 3 * n,
            "namespace + service account; per endpoint the weights volume, the server Deployment (LeaderWorkerSet "
            "when multi-node) + internal NLB Service, the KEDA ScaledObject",
        ),
    ]
