"""The `inference:` section: each domain rule fails through the loader with one line naming file, field and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.config.inference import RealtimeEndpointConfig
from mlstack.errors import BlueprintError

MODEL: dict[str, Any] = {
    "artifact": {"key": "m/model.tar.gz"},
    "image": {"source": "dlc", "account": "763104351884", "repository": "djl-inference", "tag": "0.29.0"},
    "parameters_billion": 8,
}
GPU_AMI = "al2-ami-sagemaker-inference-gpu-2"
NEURON_AMI = "al2-ami-sagemaker-inference-neuron-2"
REALTIME: dict[str, Any] = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.g5.2xlarge"}]}


def _load(tmp_path: Path, endpoints: list[dict[str, Any]], **inference: Any) -> Any:
    document = {"description": "test", "inference": {"model": MODEL, "endpoints": endpoints} | inference}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(document))
    return load(path)


def _problems(tmp_path: Path, endpoints: list[dict[str, Any]], **inference: Any) -> tuple[str, ...]:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, endpoints, **inference)
    return info.value.problems


def test_a_minimal_realtime_endpoint_loads_with_secure_defaults(tmp_path: Path) -> None:
    config = _load(tmp_path, [REALTIME])
    (endpoint,) = config.inference.endpoints
    assert isinstance(endpoint, RealtimeEndpointConfig)
    assert endpoint.variants[0].name == "AllTraffic"
    assert endpoint.uses_volume_key is False  # g5 has local NVMe
    assert config.inference.needs_data_bucket is False


@pytest.mark.parametrize(
    ("endpoint", "field", "message"),
    [
        (
            {**REALTIME, "variants": [{"instance_type": "ml.trn2.3xlarge"}]},
            "inference.endpoints.0.realtime.variants.0.instance_type",
            "ml.trn2.3xlarge is not offered for SageMaker hosting",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "ml.g5.3xlarge"}]},
            "inference.endpoints.0.realtime.variants.0.instance_type",
            "unknown instance type 'ml.g5.3xlarge' (not in the mlstack catalog); close matches: g5.xlarge",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "g5.2xlarge"}]},
            "inference.endpoints.0.realtime.variants.0.instance_type",
            "SageMaker instance types start with 'ml.', e.g. 'ml.g5.2xlarge'",
        ),
        (
            {"name": "spiky", "mode": "serverless", "memory_mb": 1500, "max_concurrency": 5},
            "inference.endpoints.0.serverless.memory_mb",
            "serverless memory_mb must be one of 1024, 2048, 3072, 4096, 5120, 6144 (got 1500)",
        ),
        (
            {
                "name": "spiky",
                "mode": "serverless",
                "memory_mb": 2048,
                "max_concurrency": 5,
                "provisioned_concurrency": 6,
            },
            "inference.endpoints.0.serverless",
            "provisioned_concurrency (6) exceeds max_concurrency (5); lower it or raise max_concurrency",
        ),
        (
            {"name": "spiky", "mode": "serverless", "memory_mb": 2048, "max_concurrency": 201},
            "inference.endpoints.0.serverless.max_concurrency",
            "less than or equal to 200",
        ),
        (
            {
                **REALTIME,
                "variants": [
                    {
                        "instance_type": "ml.g5.2xlarge",
                        "autoscaling": {"min_instances": 3, "max_instances": 2, "target_invocations_per_instance": 9},
                    }
                ],
            },
            "inference.endpoints.0.realtime.variants.0.autoscaling",
            "autoscaling min_instances (3) exceeds max_instances (2); raise max_instances or lower min_instances",
        ),
        (
            {**REALTIME, "volume_kms_key": True},
            "inference.endpoints.0.realtime",
            "volume_kms_key: true, but ml.g5.2xlarge has local NVMe storage, which SageMaker encrypts in hardware",
        ),
        (
            {"name": "jobs", "mode": "async", "instance_type": "ml.g5.xlarge"},
            "inference.endpoints.0.async",
            "async endpoint 'jobs' has no output_path; add output_path: <prefix>",
        ),
        (
            {
                **REALTIME,
                "variants": [
                    {
                        "instance_type": "ml.c7i.8xlarge",
                        "autoscaling": {"min_instances": 0, "max_instances": 2, "target_invocations_per_instance": 9},
                    }
                ],
            },
            "inference.endpoints.0.realtime",
            "autoscaling min_instances 0 is only possible for async endpoints",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "ml.g5.2xlarge", "weight": 0}]},
            "inference.endpoints.0.realtime",
            "every variant has weight 0",
        ),
        (
            {"name": "jobs", "mode": "async", "instance_type": "ml.g5.xlarge", "output_path": "a", "input_path": "a"},
            "inference.endpoints.0.async",
            "output_path, failure_path and input_path must differ",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "ml.inf2.xlarge", "inference_ami_version": GPU_AMI}]},
            "inference.endpoints.0.realtime.variants.0",
            "inference_ami_version al2-ami-sagemaker-inference-gpu-2 is an NVIDIA GPU host AMI, but ml.inf2.xlarge "
            "has no NVIDIA GPU; remove inference_ami_version",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "ml.c7i.8xlarge", "inference_ami_version": GPU_AMI}]},
            "inference.endpoints.0.realtime.variants.0",
            "but ml.c7i.8xlarge has no NVIDIA GPU",
        ),
        (
            {**REALTIME, "variants": [{"instance_type": "ml.inf1.xlarge", "inference_ami_version": NEURON_AMI}]},
            "inference.endpoints.0.realtime.variants.0",
            "inference_ami_version al2-ami-sagemaker-inference-neuron-2 is for Inferentia2 and Trainium hosts, "
            "not ml.inf1.xlarge",
        ),
        (
            {
                "name": "jobs",
                "mode": "async",
                "instance_type": "ml.g5.xlarge",
                "output_path": "out",
                "inference_ami_version": NEURON_AMI,
            },
            "inference.endpoints.0.async",
            "is for Inferentia2 and Trainium hosts, not ml.g5.xlarge",
        ),
        (
            {
                "name": "spiky",
                "mode": "serverless",
                "memory_mb": 2048,
                "max_concurrency": 5,
                "data_capture": {"sampling_percent": 5},
            },
            "inference.endpoints.0.serverless",
            "data_capture: serverless endpoints do not support data capture (and so Model Monitor) (SageMaker "
            "serverless limits); remove it, or use mode: realtime or mode: async",
        ),
        (
            {
                "name": "spiky",
                "mode": "serverless",
                "memory_mb": 2048,
                "max_concurrency": 5,
                "instance_type": "ml.g5.xlarge",
            },
            "inference.endpoints.0.serverless",
            "instance_type: serverless endpoints do not support instance types or GPUs",
        ),
    ],
    ids=[
        "not-for-hosting",
        "unknown-type",
        "no-ml-prefix",
        "serverless-memory",
        "provisioned-over-max",
        "concurrency-over-200",
        "autoscaling-min-over-max",
        "kms-on-nvme",
        "async-without-output",
        "realtime-to-zero",
        "all-weights-zero",
        "async-same-prefix",
        "gpu-ami-on-neuron",
        "gpu-ami-on-cpu",
        "neuron-ami-on-inf1",
        "async-ami-mismatch",
        "serverless-data-capture",
        "serverless-gpu-instance",
    ],
)
def test_fails_with_a_line_naming_file_field_and_fix(
    tmp_path: Path, endpoint: dict[str, Any], field: str, message: str
) -> None:
    (problem,) = _problems(tmp_path, [endpoint])
    assert problem.startswith(f"{tmp_path / 'bp.yaml'}: {field}: "), problem
    assert message in problem


def test_fails_on_an_unknown_mode_listing_the_modes(tmp_path: Path) -> None:
    (problem,) = _problems(tmp_path, [{**REALTIME, "mode": "batch"}])
    assert "inference.endpoints.0" in problem and "'realtime', 'serverless', 'async'" in problem


def test_fails_on_duplicate_endpoint_names(tmp_path: Path) -> None:
    (problem,) = _problems(tmp_path, [REALTIME, REALTIME])
    assert "endpoint names chat appear more than once" in problem


def test_fails_when_the_invoke_api_names_an_unknown_or_async_endpoint(tmp_path: Path) -> None:
    (problem,) = _problems(tmp_path, [REALTIME], invoke_api={"endpoint": "nope"})
    assert "invoke_api.endpoint 'nope' is not an endpoint here; use one of chat" in problem
    jobs = {"name": "jobs", "mode": "async", "instance_type": "ml.g5.xlarge", "output_path": "out"}
    (problem,) = _problems(tmp_path, [jobs], invoke_api={"endpoint": "jobs"})
    assert "is async" in problem


def test_fails_on_a_misspelt_key_in_a_variant(tmp_path: Path) -> None:
    (problem,) = _problems(tmp_path, [{**REALTIME, "variants": [{"instance_type": "ml.g5.2xlarge", "wieght": 1}]}])
    assert "inference.endpoints.0.realtime.variants.0.wieght: unknown key" in problem


def test_existing_bucket_key_needs_an_existing_bucket(tmp_path: Path) -> None:
    global MODEL
    saved = MODEL
    try:
        MODEL = {
            **saved,
            "artifact": {"key": "k", "existing_bucket_key_arn": "arn:aws:kms:us-east-1:111111111111:key/x"},
        }
        (problem,) = _problems(tmp_path, [REALTIME])
    finally:
        MODEL = saved
    assert "existing_bucket_key_arn is only for an existing_bucket" in problem


def test_volume_key_defaults_on_for_ebs_hosts_and_off_for_nvme_hosts(tmp_path: Path) -> None:
    mixed = {
        **REALTIME,
        "variants": [{"instance_type": "ml.c7i.8xlarge"}, {"name": "b", "instance_type": "ml.g6.xlarge"}],
    }
    cpu = {**REALTIME, "name": "cpu", "variants": [{"instance_type": "ml.c7i.8xlarge"}]}
    off = {**cpu, "name": "off", "volume_kms_key": False}
    endpoints = _load(tmp_path, [mixed, cpu, off]).inference.endpoints
    assert [e.uses_volume_key for e in endpoints] == [False, True, False]


def test_fails_when_an_isolated_network_lacks_the_ecr_and_s3_endpoints(tmp_path: Path) -> None:
    document = {
        "description": "test",
        "network": {"nat_gateways": 0, "interface_endpoints": ["ecr.api", "logs"], "gateway_endpoints": []},
        "inference": {"model": MODEL, "endpoints": [REALTIME]},
    }
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(BlueprintError) as info:
        load(path)
    (problem,) = info.value.problems
    assert problem == (
        f"{path}: network.nat_gateways is 0, so endpoint(s) chat can pull the image and the model artifact only "
        "through VPC endpoints; add ecr.dkr in network.interface_endpoints and s3 in network.gateway_endpoints "
        "(or a NAT gateway)"
    )
    # Serverless endpoints run outside the VPC: the same network is fine for them.
    document["inference"]["endpoints"] = [  # type: ignore[index]
        {"name": "spiky", "mode": "serverless", "memory_mb": 2048, "max_concurrency": 5}
    ]
    path.write_text(yaml.safe_dump(document))
    assert load(path).network.nat_gateways == 0


def test_the_neuron_ami_is_the_default_on_inferentia2_and_trainium_only(tmp_path: Path) -> None:
    # botocore: al2-ami-sagemaker-inference-neuron-2 is for "Inferentia2 and Trainium"; inf1 keeps the default.
    variants = [
        {"name": name, "instance_type": instance_type, "weight": 1}
        for name, instance_type in [("a", "ml.inf2.8xlarge"), ("b", "ml.trn1.2xlarge"), ("c", "ml.inf1.6xlarge")]
    ]
    (endpoint,) = _load(tmp_path, [{**REALTIME, "variants": variants}]).inference.endpoints
    assert [v.ami_version for v in endpoint.variants] == [NEURON_AMI, NEURON_AMI, None]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["a-b", "a--b"], "endpoint name 'a--b' becomes construct ID 'AB', which endpoint 'a-b' already uses"),
        (["a1b", "a-1b"], "endpoint name 'a-1b' becomes construct ID 'A1b', which endpoint 'a1b' already uses"),
        (["data-bucket"], "endpoint name 'data-bucket' becomes construct ID 'DataBucket', which the InferenceStack"),
        (["ab", "ab-endpoint-name"], "becomes construct ID 'AbEndpointName', which endpoint 'ab' already uses"),
    ],
    ids=["double-hyphen", "digit-after-hyphen", "stack-resource", "output-name"],
)
def test_fails_when_endpoint_names_map_to_one_construct_id(tmp_path: Path, names: list[str], message: str) -> None:
    # Without this check the synth stops with a jsii traceback ("There is already a Construct with name ...").
    endpoints = [{"name": n, "mode": "serverless", "memory_mb": 2048, "max_concurrency": 5} for n in names]
    (problem,) = _problems(tmp_path, endpoints)
    assert problem.startswith(f"{tmp_path / 'bp.yaml'}: inference: "), problem
    assert message in problem


@pytest.mark.parametrize(
    ("model", "field", "message"),
    [
        (
            {**MODEL, "environment": {"MAX-TOKENS": "4096", "OK_NAME": "1"}},
            "inference.model.environment",
            "environment variable name(s) 'MAX-TOKENS' are not valid for SageMaker",
        ),
        (
            {**MODEL, "environment": {f"V{i}": "x" for i in range(101)}},
            "inference.model.environment",
            "Dictionary should have at most 100 items",
        ),
        (
            {**MODEL, "image": {**MODEL["image"], "region": "useast1"}},
            "inference.model.image.dlc.region",
            "String should match pattern",
        ),
    ],
    ids=["env-name", "env-count", "dlc-region"],
)
def test_fails_on_what_create_model_would_reject(
    tmp_path: Path, model: dict[str, Any], field: str, message: str
) -> None:
    document = {"description": "test", "inference": {"model": model, "endpoints": [REALTIME]}}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(BlueprintError) as info:
        load(path)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: {field}: "), problem
    assert message in problem
