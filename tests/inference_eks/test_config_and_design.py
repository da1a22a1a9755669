"""`inference: {engine: eks}`: validation (one line each, naming the fix) and the sizing the design derives."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog.memory import GIB, inference_memory, shape_for_params
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.design.serving import estimate_instance
from mlstack.design.serving_eks import ACTIVATION_RESERVE, server_designs
from tests.inference_eks.edits import load_edited, one_line_problem

BASE: dict[str, Any] = yaml.safe_load((BLUEPRINTS_DIR / "eks-llm-serving.yaml").read_text())


_load = partial(load_edited, BASE)
_problem = partial(one_line_problem, BASE)


def _endpoint(**changes: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["endpoints"][0].update(changes)

    return edit


def test_the_shipped_blueprint_is_read_as_the_eks_engine_with_one_inference_stack(tmp_path: Path) -> None:
    config = _load(tmp_path)
    assert config.inference is None and config.inference_eks is not None
    assert config.stack_ids == ["NetworkStack", "InferenceStack"]
    # The serving nodes' endpoints plus Secrets Manager (API key); no SageMaker endpoints.
    assert "secretsmanager" in config.network.interface_endpoints
    assert not any(k.startswith("sagemaker") for k in config.network.interface_endpoints)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _endpoint(instance_type="ml.g6e.xlarge"),
            "is a SageMaker type; engine eks runs EC2 instances, e.g. g6e.xlarge",
        ),
        (_endpoint(instance_type="m7i.xlarge"), "m7i.xlarge has no NVIDIA GPU"),
        (
            _endpoint(instance_type="inf1.xlarge"),
            "inf1.xlarge: Inferentia (inf1, NeuronCore-v1) does not serve decoder",
        ),
        (_endpoint(instance_type="g6.xlarge"), "fit on no tensor-parallel degree of g6.xlarge"),
        (_endpoint(instance_type="g6e.12xlarge", tensor_parallel=3), "tensor_parallel 3 does not divide the 4 GPUs"),
        (
            _endpoint(autoscaling={"min_replicas": 3, "max_replicas": 2}),
            "autoscaling min_replicas 3 exceeds max_replicas 2",
        ),
        (lambda d: d["inference"].update(engine="kserve"), "inference.engine 'kserve' is not known"),
        (lambda d: d["inference"]["model"].update(weights_prefix="llama"), "inference.model.weights_prefix"),
        (lambda d: d["inference"]["endpoints"].append(d["inference"]["endpoints"][0]), "endpoint names chat appear"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, edit: Any, message: str) -> None:
    assert message in _problem(tmp_path, edit)


def test_an_explicit_tensor_parallel_degree_that_leaves_too_much_per_gpu_is_rejected(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["model"]["parameters_billion"] = 70
        data["inference"]["endpoints"][0].update(instance_type="p5.48xlarge", tensor_parallel=1)

    assert "tensor_parallel 1 leaves" in _problem(tmp_path, edit)


def test_the_server_flags_come_from_the_memory_and_serving_models(tmp_path: Path) -> None:
    config = _load(tmp_path)
    (design,) = server_designs(config.inference_eks)
    tokens = BASE["inference"]["endpoints"][0]["traffic"]["tokens"]
    assert design.max_model_len == tokens["context_tokens"] + tokens["output_tokens"] == 4608
    assert design.max_num_seqs == tokens["concurrency"] == 16
    shape = shape_for_params(8.03e9)
    need = inference_memory(
        8.03e9,
        precision="bf16",
        layers=shape.layers,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        context=4608,
        batch=16,
    ).total_bytes
    assert design.need_gib_per_gpu == pytest.approx(need / GIB)
    # weights + KV cache of 16 x 4,608 tokens over the L40S's 44.7 GiB, plus the activation reserve, rounded up
    assert design.gpu_memory_utilization == pytest.approx(need / (44.7 * GIB) + ACTIVATION_RESERVE, abs=0.011)
    assert design.tensor_parallel == 1 and design.servers_per_node == 1
    args = design.vllm_args("m")
    assert args[args.index("--gpu-memory-utilization") + 1] == f"{design.gpu_memory_utilization:.2f}"
    assert args[args.index("--tensor-parallel-size") + 1] == "1"
    estimate = estimate_instance(8.03, "bf16", "g6e.xlarge", config.inference_eks.endpoints[0].workload)
    assert design.figures == estimate


def test_the_advisor_picks_tensor_parallel_and_servers_per_node(tmp_path: Path) -> None:
    # 70B bf16 on 8 x H100 80 GB: does not fit on one or two GPUs; the degree with the most tokens/s per node wins.
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["model"]["parameters_billion"] = 70
        data["inference"]["endpoints"][0].update(
            instance_type="p5.48xlarge", autoscaling={"min_replicas": 4, "max_replicas": 4}
        )

    (design,) = server_designs(_load(tmp_path, edit).inference_eks)
    assert design.tensor_parallel in (4, 8)
    assert design.servers_per_node == 8 // design.tensor_parallel
    assert design.need_gib_per_gpu < 80 * 0.85
    assert design.max_nodes == design.min_nodes == -(-4 // design.servers_per_node)


def _fixed(**changes: Any) -> Any:
    """The endpoint edited, on fixed node groups (no Karpenter)."""

    def edit(data: dict[str, Any]) -> None:
        data["inference"]["capacity_manager"] = "node_groups"
        del data["inference"]["karpenter"]
        data["inference"]["endpoints"][0].update(changes)

    return edit


def test_max_replicas_is_at_most_what_the_fixed_nodes_hold(tmp_path: Path) -> None:
    # A fixed node group adds no node: a server beyond its GPUs would stay Pending, so the blueprint says so.
    line = _problem(tmp_path, _fixed(autoscaling={"min_replicas": 1, "max_replicas": 2}))
    assert line.endswith(
        "inference: endpoint 'chat': autoscaling max_replicas 2 exceeds the 1 server(s) its 1 g6e.xlarge node(s) "
        "hold (1 per node; a fixed node group adds no nodes); set max_replicas <= 1, or "
        "inference.capacity_manager: karpenter to add nodes"
    )
    # 4 x L40S at tensor-parallel 1: one node holds 4 servers, KEDA scales 1..4 on it; a fifth has no GPU.
    four = _fixed(instance_type="g6e.12xlarge", tensor_parallel=1, autoscaling={"min_replicas": 1})
    (design,) = server_designs(_load(tmp_path, four).inference_eks)
    assert (design.min_replicas, design.max_replicas, design.min_nodes, design.max_nodes) == (1, 4, 1, 1)
    five = _fixed(instance_type="g6e.12xlarge", tensor_parallel=1, autoscaling={"max_replicas": 5})
    assert "max_replicas 5 exceeds the 4 server(s) its 1 g6e.12xlarge node(s) hold" in _problem(tmp_path, five)
    # With Karpenter (the shipped blueprint) the limit is lifted: 2 servers on up to 2 one-GPU nodes.
    (shipped,) = server_designs(_load(tmp_path).inference_eks)
    assert (shipped.max_replicas, shipped.min_nodes, shipped.max_nodes) == (2, 1, 2)


def test_engine_sagemaker_is_the_default_and_may_be_written(tmp_path: Path) -> None:
    data = yaml.safe_load((BLUEPRINTS_DIR / "inference-gpu-realtime.yaml").read_text())
    data["inference"]["engine"] = "sagemaker"
    path = tmp_path / "sm.yaml"
    path.write_text(yaml.safe_dump(data))
    explicit = load(path)
    assert explicit.inference is not None and explicit.inference_eks is None
    assert explicit.model_dump()["inference"] == load("inference-gpu-realtime").model_dump()["inference"]


def test_a_dump_validates_again_and_both_keys_at_once_are_rejected(tmp_path: Path) -> None:
    config = _load(tmp_path)
    dumped = config.model_dump(mode="json")
    assert dumped["inference"] is None and dumped["inference_eks"]["engine"] == "eks"
    assert type(config).model_validate(dumped) == config
    sagemaker = load("inference-intel-amx").model_dump(mode="json")
    assert sagemaker["inference_eks"] is None and type(config).model_validate(sagemaker).inference is not None

    def edit(data: dict[str, Any]) -> None:
        data["inference_eks"] = data["inference"]

    assert "write the section as inference: with engine: eks, once" in _problem(tmp_path, edit)


def test_an_explicit_tensor_parallel_degree_is_what_the_estimate_prices(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["inference"]["endpoints"][0].update(instance_type="g6e.12xlarge", tensor_parallel=4)

    (design,) = server_designs(_load(tmp_path, edit).inference_eks)
    assert (design.tensor_parallel, design.servers_per_node) == (4, 1)
    assert design.figures is not None and "TP4 x 1 replica(s)" in design.figures.detail
