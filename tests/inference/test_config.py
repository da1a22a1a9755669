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
