"""Blueprint rules for what synth accepts but a real inference deployment rejects: one line each, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.errors import BlueprintError

MODEL: dict[str, Any] = {
    "artifact": {"key": "m/model.tar.gz"},
    "image": {"source": "dlc", "account": "763104351884", "repository": "djl-inference", "tag": "0.29.0"},
    "parameters_billion": 8,
}
REALTIME: dict[str, Any] = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.g5.2xlarge"}]}
SERVERLESS: dict[str, Any] = {"name": "tiny", "mode": "serverless", "memory_mb": 2048, "max_concurrency": 2}


def _load(
    tmp_path: Path, endpoints: list[dict[str, Any]], model: dict[str, Any] | None = None, **inference: Any
) -> Any:
    document = {"description": "test", "inference": {"model": model or MODEL, "endpoints": endpoints} | inference}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(document))
    return load(path)


def _problem(tmp_path: Path, endpoints: list[dict[str, Any]], model: dict[str, Any] | None = None, **kw: Any) -> str:
    with pytest.raises(BlueprintError) as info:
        _load(tmp_path, endpoints, model, **kw)
    (problem,) = info.value.problems
    return problem


# ----- host memory and Neuron serving options


def test_an_8b_model_does_not_load_through_the_16_gib_of_an_inf2_xlarge(tmp_path: Path) -> None:
    endpoint = {**REALTIME, "variants": [{"instance_type": "ml.inf2.xlarge"}]}
    assert "ml.inf2.xlarge has 16 GiB of host memory, but the model's 14.9 GiB of weights plus 4 GiB" in _problem(
        tmp_path, [endpoint]
    )
    # The same chip with 128 GiB of host memory takes it.
    assert _load(tmp_path, [{**REALTIME, "variants": [{"instance_type": "ml.inf2.8xlarge"}]}])


def test_a_cpu_host_must_hold_the_weights_in_ram(tmp_path: Path) -> None:
    endpoint = {**REALTIME, "variants": [{"instance_type": "ml.c7g.xlarge"}]}  # 8 GiB
    assert "must fit in it" in _problem(tmp_path, [endpoint])


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"OPTION_TENSOR_PARALLEL_DEGREE": "8"}, "ml.inf2.8xlarge has 2 NeuronCores; set 1..2"),
        ({"OPTION_DTYPE": "fp16"}, "OPTION_DTYPE='fp16' does not match model.precision bf16; set OPTION_DTYPE: bf16"),
    ],
)
def test_neuron_serving_options_must_match_the_host_and_the_precision(
    tmp_path: Path, environment: dict[str, str], message: str
) -> None:
    endpoint = {**REALTIME, "variants": [{"instance_type": "ml.inf2.8xlarge"}]}
    assert message in _problem(tmp_path, [endpoint], {**MODEL, "environment": environment})


# ----- network isolation


def test_an_isolated_container_cannot_download_its_model_from_a_hub(tmp_path: Path) -> None:
    model = {**MODEL, "environment": {"HF_MODEL_ID": "meta-llama/Llama-3.1-8B-Instruct"}}
    problem = _problem(tmp_path, [REALTIME], model)
    assert "makes the container download the model, but network_isolation is on (no network in the container)" in (
        problem
    )
    # The artifact path, or isolation turned off, is fine.
    assert _load(tmp_path, [REALTIME], {**MODEL, "environment": {"HF_MODEL_ID": "/opt/ml/model"}})
    assert _load(tmp_path, [REALTIME], {**model, "network_isolation": False}).inference.model.network_isolation is False


# ----- invoke API


def test_an_invoke_timeout_beyond_sagemakers_60_seconds_is_rejected(tmp_path: Path) -> None:
    problem = _problem(tmp_path, [REALTIME], invoke_api={"endpoint": "chat", "timeout_seconds": 120})
    assert "invoke_api.timeout_seconds 120 cannot help: SageMaker InvokeEndpoint answers within 60 s" in problem
    config = _load(tmp_path, [REALTIME], invoke_api={"endpoint": "chat"})
    assert config.inference.invoke_api.timeout_seconds == 70


def test_invoke_callers_must_be_iam_principal_arns(tmp_path: Path) -> None:
    problem = _problem(tmp_path, [SERVERLESS], invoke_api={"endpoint": "tiny", "callers": ["app-role"]})
    assert "invoke_api.callers 'app-role' are not IAM role or user ARNs" in problem


# ----- alarms


def test_alarm_emails_must_be_addresses(tmp_path: Path) -> None:
    assert "alarm_emails 'oncall' are not e-mail addresses" in _problem(tmp_path, [REALTIME], alarm_emails=["oncall"])


# ----- SageMaker hosting prices


def test_hosting_prices_are_dated_ml_rates_and_never_ec2_rates() -> None:
    from mlstack.catalog.hosting_prices import hosting_price, hosting_prices
    from mlstack.catalog.prices import price

    rows = hosting_prices()
    assert rows and all(r.instance.startswith("ml.") and r.source and r.read and r.as_of for r in rows.values())
    for (instance, region), row in rows.items():
        ec2 = price(instance, "ec2_on_demand", region)
        assert ec2 is None or row.usd_per_hour > ec2.usd_per_hour, instance  # SageMaker bills above the EC2 rate
    assert hosting_price("ml.c7g.xlarge", "us-east-1") is None  # no dated rate read: left missing, never guessed
    with pytest.raises(ValueError, match="not a SageMaker instance type"):
        hosting_price("g5.2xlarge", "us-east-1")


# ----- start-up limits


def test_a_volume_size_on_a_local_nvme_host_is_rejected(tmp_path: Path) -> None:
    endpoint = {**REALTIME, "variants": [{"instance_type": "ml.g5.2xlarge", "volume_size_gb": 100}]}
    assert "ml.g5.2xlarge has local NVMe storage, for which SageMaker rejects VolumeSizeInGB" in _problem(
        tmp_path, [endpoint]
    )


def test_start_up_limits_are_sized_from_the_weights() -> None:
    from mlstack.config.inference_fit import startup_limits

    # 8B at bf16 (~15 GiB): minutes, not SageMaker's short defaults; a volume only without local NVMe.
    limits = startup_limits(14.96, "ml.inf2.8xlarge")
    assert (limits.startup_timeout_seconds, limits.download_timeout_seconds, limits.volume_size_gb) == (900, 600, 48)
    assert startup_limits(14.96, "ml.g5.2xlarge").volume_size_gb is None
    assert startup_limits(140.0, "ml.g5.2xlarge").startup_timeout_seconds == 3600  # SageMaker's maximum
    small = startup_limits(0.4, "ml.c7g.xlarge")
    assert (small.startup_timeout_seconds, small.download_timeout_seconds, small.volume_size_gb) == (None, None, None)
    assert startup_limits(14.96, "ml.g5.2xlarge", startup_timeout_seconds=900).startup_timeout_seconds == 900
