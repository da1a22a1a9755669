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
- nodes: `ceil(min_replicas / servers per node)` to `ceil(max_replicas / servers per node)`; a fixed node group
  keeps the first (the config holds max_replicas to what it holds), a Karpenter pool launches up to the second
  (`mlstack.design.serving_pools`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB
from mlstack.config.inference_eks import EksEndpointConfig, EksInferenceConfig
from mlstack.design.serving import ServingFigures, estimate_instance, replica_layout

__all__ = [
    "ACTIVATION_RESERVE",
    "API_KEY_FILE",
    "MAX_UTILIZATION",
    "PORT",
    "SERVICE_ACCOUNT",
    "Part",
    "ServerDesign",
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

    def vllm_args(self, model_name: str) -> list[str]:
        """The server's command-line flags (besides the API key, read from its file at start)."""
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
            "--gpu-memory-utilization",
            f"{self.gpu_memory_utilization:.2f}",
        ]


def _design(config: EksInferenceConfig, endpoint: EksEndpointConfig) -> ServerDesign:
    model = config.model
    it = get_instance(endpoint.instance_type)
    assert it.accelerator is not None
    params = model.parameters_billion * 1e9
    layout = replica_layout(params, model.precision, it, endpoint.workload)
    if layout is None:  # the config validator rejects this blueprint first
        raise ValueError(f"endpoint {endpoint.name!r}: the model fits on no tensor-parallel degree")
    tp = endpoint.tensor_parallel or layout.tensor_parallel  # the config validator checked that it fits
    need = layout.need_bytes_per_device * layout.tensor_parallel / tp
    device = it.accelerator.memory_gib * GIB
    servers = it.accelerator.count // tp
    scaling = endpoint.autoscaling
    nodes = math.ceil(scaling.min_replicas / servers)
    top = scaling.max_replicas or nodes * servers
    tokens = endpoint.tokens
    utilization = min(MAX_UTILIZATION, math.ceil((need / device + ACTIVATION_RESERVE) * 100) / 100)
    return ServerDesign(
        endpoint=endpoint.name,
        instance_type=it.name,
        gpus_per_node=it.accelerator.count,
        tensor_parallel=tp,
        servers_per_node=servers,
        min_replicas=scaling.min_replicas,
        max_replicas=top,
        min_nodes=nodes,
        max_nodes=math.ceil(top / servers),
        max_model_len=tokens.context_tokens + tokens.output_tokens,
        max_num_seqs=tokens.concurrency,
        gpu_memory_utilization=utilization,
        need_gib_per_gpu=need / GIB,
        gpu_gib=it.accelerator.memory_gib,
        target_requests_waiting=scaling.target_requests_waiting,
        figures=estimate_instance(model.parameters_billion, model.precision, it.name, endpoint.workload, tp),
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
    groups = 0 if config.capacity_manager == "karpenter" else n  # Karpenter's pools: `serving_pools.pool_parts`
    admin = 1 if config.cluster.admin_host else 0
    admins = len(config.cluster.admin_principal_arns)
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
        Part("AWS::EC2::SecurityGroup", 1 + admin, "control plane (aws_eks_v2) and the admin host (no inbound)"),
        Part("AWS::EC2::SecurityGroupIngress", 2 * admin, "admin host to the API server"),
        Part("AWS::EC2::SecurityGroupEgress", 2 * admin, "admin host to the API server"),
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
        Part("Custom::AWSCDK-EKS-HelmChart", 2, "NVIDIA device plugin, KEDA"),
        Part(
            "Custom::AWSCDK-EKS-KubernetesResource",
            1 + 3 * n,
            "namespace + service account; per endpoint the "
            "weights volume, the server Deployment + internal NLB Service, the KEDA ScaledObject",
        ),
    ]
