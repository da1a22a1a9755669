"""The `inference:` section with `engine: eks`: open-weight LLMs served by vLLM on an EKS cluster of its own.

Same shape as the SageMaker section (`model`, `endpoints` with `name`, `mode`, `traffic`), with what EKS
serving adds: the cluster (the training layer's `cluster` and `system_node_group` settings), the serving image,
and per endpoint the EC2 GPU type, its replica range and the queue depth it scales on. Rules checked here, each
with the fix in the message:
- the instance type is in the catalog and has NVIDIA GPUs (the vLLM CUDA image) or Neuron chips of NeuronCore-v2
  and later (inf2, trn1, trn2: the Neuron vLLM image; inf1 serves no decoder LLM);
- the model, with the KV cache of `traffic.tokens.concurrency` sequences of context + output tokens, fits in
  one instance at some tensor-parallel degree, or else over the fewest EFA nodes (`nodes`), and an explicit
  `tensor_parallel` divides the instance's GPUs (NeuronCores on Neuron) (`mlstack.design.serving_layout`);
- min <= max replicas; endpoint names unique; autoscaling and node pools as `mlstack.config.inference_eks_pools`
  checks them (Karpenter lifts the fixed-node limit on max_replicas; a server over several nodes needs fixed node
  groups).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mlstack.catalog import get_instance
from mlstack.config.base import StrictModel, pascal_id
from mlstack.config.inference_eks_pools import ActiveHoursConfig, ServingKarpenterConfig, scaling_problem
from mlstack.config.inference_model import TokenWorkloadConfig, TrafficConfig
from mlstack.config.training_cluster import ClusterConfig, SystemNodeGroupConfig
from mlstack.design.serving import Workload
from mlstack.design.serving_layout import MAX_NODES, EndpointLayout, LayoutError, endpoint_layout
from mlstack.errors import CatalogError

__all__ = [
    "DLC_ACCOUNT",
    "NEURON_VLLM_IMAGE",
    "EksEndpointConfig",
    "EksInferenceConfig",
    "EksModelConfig",
    "EksScalingConfig",
    "VllmImageConfig",
    "dlc_repository",
]

_NAME = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
_PREFIX = r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*/$"

DLC_ACCOUNT = "763104351884"
"""The AWS account of the AWS Deep Learning Containers registries (DLC docs, "Available Images": Region
Availability; any account may pull after `aws ecr get-login-password`)."""
VLLM_TAG = "0.14.0-gpu-py312-cu129-ubuntu22.04-ec2"
"""vLLM 0.14.0 (PyTorch 2.9.1, CUDA 12.9.1) for EC2/ECS/EKS, AWS Deep Learning Containers release notes "AWS Deep
Learning Containers for vLLM 0.14.0 on EC2, ECS, EKS" (github.com/aws/deep-learning-containers, image URIs
`763104351884.dkr.ecr.<region>.amazonaws.com/vllm:0.14.0-gpu-py312-cu129-ubuntu22.04-ec2`; its tag list in
docs/src/data/vllm/0.14.0-gpu-ec2.yml). Built `FROM vllm/vllm-openai:v0.14.0` (docker/vllm/Dockerfile at the
0.14.0 release, commit 127cb41844), so the server, its flags and `vllm serve` on PATH are upstream's. The nodes pull it
from ECR in the stack's region through the VPC's ECR interface endpoints (layers through the S3 gateway endpoint)
with the node role's AmazonEC2ContainerRegistryReadOnly: no Docker Hub rate limit, no NAT traffic. AWS may
republish a tag with security patches of the same vLLM release; set `image.digest` to hold one build
(`aws ecr describe-images --registry-id 763104351884 --repository-name vllm --image-ids imageTag=<tag>`)."""


NEURON_VLLM_IMAGE = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx"
NEURON_VLLM_TAG = "0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04"
"""vLLM 0.16.0 on Neuron SDK 2.31.1 (vllm-neuronx over NxD Inference), the newest Neuron vLLM image whose supported
instances include inf2 and trn1 (aws-neuron/deep-learning-containers README, table "vllm-inference-neuronx": the
0.21 and 0.24 images list trn2/trn3 only). Pulled from ECR Public through the NAT gateway (no credentials)."""


def dlc_repository(region: str) -> str:
    """The vLLM DLC repository in `region` (DLC images are in the regions of "Available Images")."""
    return f"{DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/vllm"


class VllmImageConfig(StrictModel):
    """The serving image. Default: the AWS Deep Learning Containers vLLM image above, in the stack's region; a fork
    may point at its own mirror (ECR) with `repository`."""

    repository: str | None = None
    """Default: `763104351884.dkr.ecr.<env.region>.amazonaws.com/vllm`."""
    tag: str = Field(default=VLLM_TAG, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    neuron_repository: str = NEURON_VLLM_IMAGE
    """The image of Neuron (inf2/trn1) endpoints: the AWS Neuron vLLM Deep Learning Container."""
    neuron_tag: str = Field(default=NEURON_VLLM_TAG, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

    def reference(self, region: str, *, neuron: bool = False) -> str:
        if neuron:
            return f"{self.neuron_repository}:{self.neuron_tag}"
        repository = self.repository or dlc_repository(region)
        return f"{repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


class EksModelConfig(StrictModel):
    """The served model: Hugging Face files under an S3 prefix of the stack's model bucket."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
    """The model id clients send (`--served-model-name`), e.g. `llama-3.1-8b-instruct`."""
    weights_prefix: str = Field(pattern=_PREFIX)
    """Prefix in the model bucket holding config.json, the tokenizer and *.safetensors (upload with `aws s3 sync`),
    e.g. `llama-3-1-8b-instruct/`. The pods mount it read-only."""
    parameters_billion: float = Field(gt=0, le=10_000)
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    """Precision of the weights (bf16/fp16 as stored; fp8: an FP8 checkpoint, e.g. an FP8-dynamic export)."""


class EksScalingConfig(StrictModel):
    """KEDA scales the server Deployment on vLLM's own queue depth (`vllm:num_requests_waiting`)."""

    min_replicas: int = Field(default=1, ge=0, le=100)
    """0 (development) needs Karpenter and `active_hours`: the queue depth is read from the running servers, so
    with none running only the schedule can start one (`mlstack.config.inference_eks_pools`)."""
    max_replicas: int | None = Field(default=None, ge=1, le=100)
    """With Karpenter (required): the pool's limit is what these servers need. With fixed node groups: at most what
    the endpoint's nodes hold (`ceil(min_replicas / servers per node)` nodes x servers per node), default that."""
    target_requests_waiting: float = Field(default=4, gt=0, le=10_000)
    """Requests waiting per replica (summed over the servers) at which KEDA adds a replica."""
    active_hours: ActiveHoursConfig | None = None
    """With min_replicas 0: when servers run (KEDA cron trigger)."""


class EksEndpointConfig(StrictModel):
    """One model server fleet: a vLLM Deployment on its own GPU node group, behind an internal load balancer."""

    name: str = Field(pattern=_NAME)
    mode: Literal["realtime"] = "realtime"
    instance_type: str
    """EC2 GPU or Neuron instance type (no `ml.` prefix), e.g. g6e.xlarge or inf2.8xlarge."""
    tensor_parallel: int | None = Field(default=None, ge=1, le=64)
    """GPUs per server (NeuronCores on inf2/trn1: 2 per chip). Default: the degree `mlstack advise --task infer`
    picks for the model and workload."""
    autoscaling: EksScalingConfig = Field(default_factory=EksScalingConfig)
    traffic: TrafficConfig | None = None
    """Plan assumptions; `traffic.tokens` sizes --max-model-len, --max-num-seqs and the memory check (default
    4096 prompt + 256 output tokens, 8 sequences)."""
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    """Nodes one server spans (multi-node: tensor parallel over each node's GPUs, pipeline parallel over the nodes,
    run by a LeaderWorkerSet; EFA instances and `capacity_manager: node_groups` only). Default: 1 when the model fits
    one node, else the fewest nodes that hold it (`mlstack.design.serving_layout`)."""

    @field_validator("instance_type")
    @classmethod
    def _gpu(cls, value: str) -> str:
        if value.startswith("ml."):
            raise ValueError(f"{value!r} is a SageMaker type; engine eks runs EC2 instances, e.g. {value[3:]}")
        try:
            it = get_instance(value)
        except CatalogError as err:
            raise ValueError(str(err).replace("\n", "; ")) from None
        if it.accelerator is None:
            raise ValueError(
                f"{value} has no NVIDIA GPU or Neuron accelerator; vLLM serves on g5/g6/g6e/p4/p5 or inf2/trn1 types"
            )
        return it.name

    @model_validator(mode="after")
    def _replicas(self) -> EksEndpointConfig:
        top = self.autoscaling.max_replicas
        if top is not None and self.autoscaling.min_replicas > top:
            raise ValueError(
                f"endpoint {self.name!r}: autoscaling min_replicas {self.autoscaling.min_replicas} exceeds "
                f"max_replicas {self.autoscaling.max_replicas}; lower min or raise max"
            )
        return self

    @property
    def tokens(self) -> TokenWorkloadConfig:
        return (self.traffic.tokens if self.traffic else None) or TokenWorkloadConfig()

    @property
    def workload(self) -> Workload:
        t = self.tokens
        return Workload(t.context_tokens, t.output_tokens, t.concurrency)

    @property
    def construct_id(self) -> str:
        return pascal_id(self.name)

    def layout(self, model: EksModelConfig) -> EndpointLayout:
        """How one server of `model` is laid out on this endpoint's instances (raises `LayoutError`)."""
        return endpoint_layout(
            model.parameters_billion,
            model.precision,
            get_instance(self.instance_type),
            self.workload,
            tensor_parallel=self.tensor_parallel,
            nodes=self.nodes,
        )


class EksInferenceConfig(StrictModel):
    """vLLM servers on an EKS cluster of their own (InferenceStack), weights from the stack's model bucket."""

    engine: Literal["eks"]
    model: EksModelConfig
    image: VllmImageConfig = Field(default_factory=VllmImageConfig)
    endpoints: list[EksEndpointConfig] = Field(min_length=1, max_length=5)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    system_node_group: SystemNodeGroupConfig = Field(default_factory=SystemNodeGroupConfig)
    namespace: str = Field(default="serving", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    capacity_manager: Literal["node_groups", "karpenter"] = "node_groups"
    """`node_groups`: a fixed GPU node group per endpoint. `karpenter`: a Karpenter pool per endpoint that launches
    the nodes KEDA's servers need, up to max_replicas (`mlstack.design.serving_pools`)."""
    karpenter: ServingKarpenterConfig | None = None
    """Karpenter pool settings (default `ServingKarpenterConfig()`); only with capacity_manager karpenter."""

    @model_validator(mode="after")
    def _fit(self) -> EksInferenceConfig:
        names = [e.name for e in self.endpoints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"endpoint names {', '.join(dupes)} appear more than once; name each endpoint once")
        pooled = self.capacity_manager == "karpenter"
        if self.karpenter is not None and not pooled:
            raise ValueError(
                "inference.karpenter is set but capacity_manager is node_groups; set capacity_manager: karpenter"
            )
        model = self.model
        for e in self.endpoints:
            s = e.autoscaling
            problem = scaling_problem(
                e.name,
                min_replicas=s.min_replicas,
                max_replicas=s.max_replicas,
                active_hours=s.active_hours,
                karpenter=pooled,
            )
            if problem:
                raise ValueError(problem)
            it = get_instance(e.instance_type)
            assert it.accelerator is not None
            try:
                layout = e.layout(model)
            except LayoutError as err:
                raise ValueError(f"endpoint {e.name!r}: {err}") from None
            if pooled and layout.nodes > 1:
                # A serving pool has no EFA interfaces, no single zone and no placement group, which the group's
                # pipeline stages need between their nodes.
                raise ValueError(
                    f"endpoint {e.name!r} spans {layout.nodes} nodes (LeaderWorkerSet): its nodes need EFA in one "
                    "placement group, which the Karpenter serving pools do not give; use capacity_manager: node_groups"
                )
            servers = layout.servers_per_node
            hold = -(-e.autoscaling.min_replicas // servers) * servers
            top = e.autoscaling.max_replicas
            if not pooled and top is not None and top > hold:
                raise ValueError(
                    f"endpoint {e.name!r}: autoscaling max_replicas {top} exceeds the {hold} server(s) its "
                    f"{hold // servers * layout.nodes} {e.instance_type} node(s) hold ({servers} per node; a fixed "
                    f"node group adds no nodes); set max_replicas <= {hold}"
                    + ("" if layout.nodes > 1 else ", or inference.capacity_manager: karpenter to add nodes")
                )
        return self
