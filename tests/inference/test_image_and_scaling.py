"""Uncompressed model data, concurrency-based scaling, the host AMI the image's CUDA needs, the DLC registry per
region, and the interface endpoints an inference network gets: each bad input fails with one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.catalog.dlc_registries import dlc_account, dlc_registries
from mlstack.config import load
from mlstack.config.inference_image import gpu_ami_for, image_cuda
from mlstack.config.network import DEFAULT_INTERFACE_ENDPOINTS, default_interface_endpoints
from mlstack.errors import BlueprintError

TGI = "2.4.0-tgi2.3.1-gpu-py311-cu124-ubuntu22.04"
MODEL: dict[str, Any] = {
    "artifact": {"key": "m/model.tar.gz"},
    "image": {"source": "dlc", "repository": "huggingface-pytorch-tgi-inference", "tag": TGI},
    "parameters_billion": 1,
}
REALTIME: dict[str, Any] = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.g5.2xlarge"}]}


def _document(endpoints: list[dict[str, Any]], model: dict[str, Any], region: str, **top: Any) -> dict[str, Any]:
    return {
        "description": "test",
        "env": {"region": region},
        "inference": {"model": model, "endpoints": endpoints},
    } | top


def _load(tmp_path: Path, endpoints: list[dict[str, Any]], model: dict[str, Any] | None = None, **kw: Any) -> Any:
    region = kw.pop("region", "us-east-1")
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(_document(endpoints, model or MODEL, region, **kw)))
    return load(path)


def _problem(tmp_path: Path, endpoints: list[dict[str, Any]], model: dict[str, Any] | None = None, **kw: Any) -> str:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, endpoints, model, **kw)
    (problem,) = info.value.problems
    assert "\n" not in problem
    return problem


# ----- uncompressed model data


def test_an_uncompressed_artifact_is_a_prefix(tmp_path: Path) -> None:
    model = {**MODEL, "artifact": {"key": "llama/model.tar.gz", "uncompressed": True}}
    assert "must be a prefix ending in '/'" in _problem(tmp_path, [REALTIME], model)
    model = {**MODEL, "artifact": {"key": "llama/"}}
    assert "is a prefix: set uncompressed: true" in _problem(tmp_path, [REALTIME], model)
    model = {**MODEL, "artifact": {"key": "llama/", "uncompressed": True}}
    assert _load(tmp_path, [REALTIME], model).inference.model.artifact.uncompressed


# ----- concurrency-based scaling


@pytest.mark.parametrize(
    ("autoscaling", "message"),
    [
        ({"metric": "concurrent_requests"}, "autoscaling metric concurrent_requests needs target_concurrent_requests"),
        ({}, "autoscaling metric invocations needs target_invocations_per_instance"),
        (
            {
                "metric": "concurrent_requests",
                "target_concurrent_requests_per_model": 4,
                "target_invocations_per_instance": 60,
            },
            "takes target_concurrent_requests_per_model, not target_invocations_per_instance",
        ),
    ],
)
def test_a_scaling_metric_takes_its_own_target(tmp_path: Path, autoscaling: dict[str, Any], message: str) -> None:
    variant = {"instance_type": "ml.g5.2xlarge", "autoscaling": {"min_instances": 1, "max_instances": 2, **autoscaling}}
    assert message in _problem(tmp_path, [{**REALTIME, "variants": [variant]}])


# ----- host AMI from the image's CUDA


def test_the_cuda_version_is_read_from_the_image_tag() -> None:
    assert image_cuda(TGI) == (12, 4)
    assert image_cuda("2.1.0-transformers4.37.0-gpu-py310-cu118-ubuntu20.04") == (11, 8)
    assert image_cuda("0.33.0-lmi15.0.0-cu128") == (12, 8)
    assert image_cuda("2.1.0-cpu-py310-ubuntu20.04-sagemaker") is None
    assert image_cuda("custom") is None


def test_the_pinned_ami_is_the_oldest_driver_that_runs_the_images_cuda() -> None:
    assert gpu_ami_for((11, 8)) == "al2-ami-sagemaker-inference-gpu-2"
    assert gpu_ami_for((12, 2)) == "al2-ami-sagemaker-inference-gpu-2"
    assert gpu_ami_for((12, 4)) == "al2-ami-sagemaker-inference-gpu-3-1"
    assert gpu_ami_for((12, 8)) == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert gpu_ami_for((13, 1)) is None
    assert gpu_ami_for(None) is None


def test_a_pinned_ami_older_than_the_images_cuda_is_rejected(tmp_path: Path) -> None:
    variant = {"instance_type": "ml.g5.2xlarge", "inference_ami_version": "al2-ami-sagemaker-inference-gpu-2"}
    problem = _problem(tmp_path, [{**REALTIME, "variants": [variant]}])
    assert "al2-ami-sagemaker-inference-gpu-2 has CUDA 12.2, but image tag" in problem
    assert "needs CUDA 12.4; use al2-ami-sagemaker-inference-gpu-3-1" in problem


def test_an_image_newer_than_every_host_ami_is_rejected(tmp_path: Path) -> None:
    model = {**MODEL, "image": {**MODEL["image"], "tag": "1.0-gpu-cu131"}}
    assert "needs CUDA 13.1, newer than any SageMaker inference host AMI" in _problem(tmp_path, [REALTIME], model)
    # A CPU host does not care what CUDA the tag names.
    cpu = {**REALTIME, "variants": [{"instance_type": "ml.c7i.8xlarge"}]}
    assert _load(tmp_path, [cpu], model)


def test_host_ami_pins_the_images_cuda_on_nvidia_hosts_only(tmp_path: Path) -> None:
    endpoints = [
        {**REALTIME, "variants": [{"name": "g5", "instance_type": "ml.g5.2xlarge"}]},
        {"name": "cpu", "mode": "realtime", "variants": [{"instance_type": "ml.c7i.8xlarge"}]},
    ]
    inference = _load(tmp_path, endpoints).inference
    (gpu, cpu) = [v for _, v in inference.hosted_variants()]
    assert inference.host_ami(gpu) == "al2-ami-sagemaker-inference-gpu-3-1"
    assert inference.host_ami(cpu) is None


# ----- DLC registry per region


def test_the_dlc_registry_account_comes_from_the_catalog_table() -> None:
    assert dlc_account("us-east-1") == "763104351884"
    assert dlc_account("af-south-1") == "626614931356"
    assert dlc_account("xx-nowhere-1") is None
    assert dlc_registries().read == "2026-11-30"


def test_another_regions_dlc_account_is_rejected(tmp_path: Path) -> None:
    model = {**MODEL, "image": {**MODEL["image"], "account": "763104351884"}}
    problem = _problem(tmp_path, [REALTIME], model, region="af-south-1")
    assert "763104351884 is the DLC registry of other regions; af-south-1's is 626614931356" in problem
    # Without an account the table supplies af-south-1's own.
    assert _load(tmp_path, [REALTIME], region="af-south-1").inference.model.image.account is None


def test_a_region_without_a_known_dlc_registry_needs_an_account(tmp_path: Path) -> None:
    problem = _problem(tmp_path, [REALTIME], region="il-central-1")
    assert "no AWS Deep Learning Containers registry is known for il-central-1" in problem
    model = {**MODEL, "image": {**MODEL["image"], "account": "123456789012"}}
    assert _load(tmp_path, [REALTIME], model, region="il-central-1")


# ----- interface endpoints of an inference network


def test_an_inference_network_gets_only_the_ecr_endpoints(tmp_path: Path) -> None:
    assert _load(tmp_path, [REALTIME]).network.interface_endpoints == ["ecr.api", "ecr.dkr"]
    serverless = {"name": "tiny", "mode": "serverless", "memory_mb": 2048, "max_concurrency": 2}
    cpu_model = {**MODEL, "image": {**MODEL["image"], "tag": "2.1.0-cpu"}}
    assert _load(tmp_path, [serverless], cpu_model).network.interface_endpoints == []
    # An explicit list still wins.
    explicit = _load(tmp_path, [REALTIME], network={"interface_endpoints": ["ecr.api", "ecr.dkr", "logs"]})
    assert explicit.network.interface_endpoints == ["ecr.api", "ecr.dkr", "logs"]


def test_other_layers_keep_the_default_endpoint_set() -> None:
    assert default_interface_endpoints(training=False, admin_host=False, inference=False) == list(
        DEFAULT_INTERFACE_ENDPOINTS
    )
    assert default_interface_endpoints(training=False, admin_host=False, inference=True, others=True) == list(
        DEFAULT_INTERFACE_ENDPOINTS
    )
    assert "ecr.api" in default_interface_endpoints(training=True, admin_host=False, inference=True)
    assert "logs" not in default_interface_endpoints(training=False, admin_host=False, inference=True)
