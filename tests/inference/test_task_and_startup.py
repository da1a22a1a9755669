"""Start-up of the serving container: the Hugging Face toolkit's task (HF_TASK), and a Neuron model compiled at
start-up or loaded pre-compiled, with a health-check timeout sized for it and its reason in the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.config import load
from mlstack.config.inference_fit import MAX_STARTUP_SECONDS, startup_limits
from mlstack.errors import BlueprintError
from mlstack.plan import build_plan

HF_IMAGE = {
    "source": "dlc",
    "repository": "huggingface-pytorch-inference",
    "tag": "2.1.0-transformers4.37.0-gpu-py310-cu118-ubuntu20.04",
}
LMI_NEURON = {"source": "dlc", "repository": "djl-inference", "tag": "0.29.0-neuronx-sdk2.19.1"}
ASYNC = {
    "name": "transcribe",
    "mode": "async",
    "instance_type": "ml.g5.xlarge",
    "output_path": "out",
    "failure_path": "failed",
}
INF2 = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.inf2.8xlarge"}]}
GPU = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.g5.12xlarge"}]}


def _model(image: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"artifact": {"key": "m/model.tar.gz"}, "image": image, "parameters_billion": 1.55, **fields}


def _path(tmp_path: Path, model: dict[str, Any], endpoint: dict[str, Any]) -> Path:
    document = {"description": "test", "inference": {"model": model, "endpoints": [endpoint]}}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _problem(tmp_path: Path, model: dict[str, Any], endpoint: dict[str, Any]) -> str:
    with pytest.raises(BlueprintError) as info:
        load(_path(tmp_path, model, endpoint))
    (problem,) = info.value.problems
    assert "\n" not in problem
    return problem


# ----- item: the Hugging Face toolkit's task


def test_a_hugging_face_image_without_a_task_is_rejected_naming_the_field(tmp_path: Path) -> None:
    problem = _problem(tmp_path, _model(HF_IMAGE), ASYNC)
    assert "inference.model: task: huggingface-pytorch-inference needs the pipeline task (HF_TASK)" in problem
    assert "set task, e.g. automatic-speech-recognition" in problem


@pytest.mark.parametrize(
    "repository",
    ["huggingface-tensorflow-inference", "huggingface-pytorch-inference-neuronx", "huggingface-pytorch-inference"],
)
def test_every_toolkit_image_needs_it(tmp_path: Path, repository: str) -> None:
    assert "task:" in _problem(tmp_path, _model({**HF_IMAGE, "repository": repository}), ASYNC)


def test_the_task_becomes_hf_task_in_the_container(tmp_path: Path) -> None:
    config = load(_path(tmp_path, _model(HF_IMAGE, task="automatic-speech-recognition"), ASYNC)).inference
    assert config is not None
    (endpoint,) = config.endpoints
    assert config.container_environment(endpoint) == {"HF_TASK": "automatic-speech-recognition"}
    # HF_TASK given in the environment is accepted as it is.
    model = _model(HF_IMAGE, environment={"HF_TASK": "automatic-speech-recognition"})
    assert load(_path(tmp_path, model, ASYNC)).inference is not None


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_model(LMI_NEURON, task="text-generation"), "task: only the Hugging Face inference containers read it"),
        (
            _model(HF_IMAGE, task="automatic-speech-recognition", environment={"HF_TASK": "text2text-generation"}),
            "task 'automatic-speech-recognition' and environment HF_TASK='text2text-generation' differ",
        ),
        (
            # TGI is not the toolkit: it needs no task, and one is an error.
            _model({**HF_IMAGE, "repository": "huggingface-pytorch-tgi-inference"}, task="text-generation"),
            "task: only the Hugging Face inference containers read it",
        ),
    ],
)
def test_a_task_the_image_does_not_read_is_rejected(tmp_path: Path, model: dict[str, Any], message: str) -> None:
    assert message in _problem(tmp_path, model, ASYNC)


def test_a_tgi_image_needs_no_task(tmp_path: Path) -> None:
    model = _model({**HF_IMAGE, "repository": "huggingface-pytorch-tgi-inference"})
    assert load(_path(tmp_path, model, ASYNC)).inference is not None


# ----- item: Neuron compiled at start-up or pre-compiled


def test_compiling_at_start_up_waits_longer_and_says_why() -> None:
    compiled = startup_limits(14.96, "ml.inf2.8xlarge", compiles_at_startup=True)
    loaded = startup_limits(14.96, "ml.inf2.8xlarge")
    assert compiled.startup_timeout_seconds == 1945  # 15 GiB x (40 s load + 90 s neuronx-cc)
    # Even pre-compiled, a Neuron host loads and shards the graph through host memory: 900 s, not 600 s.
    assert loaded.startup_timeout_seconds == 900
    assert "at least 900 s on a Neuron host" in loaded.reason
    assert startup_limits(14.96, "ml.g5.2xlarge").startup_timeout_seconds == 600  # a GPU host keeps 600 s
    assert "compiles the model at start-up" in compiled.reason and "neuron_compiled_graph" in compiled.reason
    assert compiled.download_timeout_seconds == loaded.download_timeout_seconds == 600  # the download is the same
    huge = startup_limits(130.0, "ml.inf2.48xlarge", compiles_at_startup=True)
    assert huge.startup_timeout_seconds == MAX_STARTUP_SECONDS == 3600
    assert huge.needed_seconds is not None and huge.needed_seconds > 3600
    assert "capped at SageMaker's 3600 s" in huge.reason


def _inf2(tmp_path: Path, **fields: Any) -> Path:
    model = _model(LMI_NEURON, parameters_billion=8.03, precision="bf16", **fields)
    return _path(tmp_path, model, INF2)


def test_a_precompiled_graph_is_loaded_from_the_artifact(tmp_path: Path) -> None:
    config = load(_inf2(tmp_path, neuron_compiled_graph="compiled")).inference
    assert config is not None
    (endpoint,) = config.endpoints
    assert config.container_environment(endpoint) == {"OPTION_COMPILED_GRAPH_PATH": "/opt/ml/model/compiled"}
    (variant,) = endpoint.variants  # type: ignore[union-attr]
    assert config.startup(variant).startup_timeout_seconds == 900  # the Neuron minimum


def test_without_it_the_lmi_container_is_given_the_time_to_compile(tmp_path: Path) -> None:
    blueprint = load(_inf2(tmp_path))
    config = blueprint.inference
    assert config is not None
    (endpoint,) = config.endpoints
    (variant,) = endpoint.variants  # type: ignore[union-attr]
    assert config.startup(variant).startup_timeout_seconds == 1945
    # LMI gives up loading after its own 1800 s unless told otherwise: raised to the health check's wait.
    assert config.container_environment(endpoint) == {"OPTION_MODEL_LOADING_TIMEOUT": "1945"}
    rows = "\n".join(dict(build_plan(blueprint).details["sections"])["Endpoint chat (realtime)"])
    assert "start-up health check 1945 s: the Neuron container compiles the model at start-up" in rows


def test_the_plan_warns_when_even_the_maximum_is_too_short(tmp_path: Path) -> None:
    model = _model(LMI_NEURON, parameters_billion=70, precision="bf16")
    endpoint = {"name": "chat", "mode": "realtime", "variants": [{"instance_type": "ml.inf2.48xlarge"}]}
    plan = build_plan(load(_path(tmp_path, model, endpoint)))
    (warning,) = [w for w in plan.warnings if "health-check maximum" in w]
    assert "compile the model ahead of time (inference.model.neuron_compiled_graph)" in warning


@pytest.mark.parametrize(
    ("model", "endpoint", "message"),
    [
        (
            _model(LMI_NEURON, neuron_compiled_graph="compiled"),
            GPU,
            "model.neuron_compiled_graph: no variant runs on a Neuron host",
        ),
        (
            _model(LMI_NEURON, neuron_compiled_graph="compiled", environment={"OPTION_COMPILED_GRAPH_PATH": "/opt/x"}),
            INF2,
            "neuron_compiled_graph and environment OPTION_COMPILED_GRAPH_PATH both name the compiled graph",
        ),
        (_model(LMI_NEURON, neuron_compiled_graph="../x"), INF2, "must stay inside the artifact"),
    ],
)
def test_bad_compiled_graph_settings_are_one_line_errors(
    tmp_path: Path, model: dict[str, Any], endpoint: dict[str, Any], message: str
) -> None:
    assert message in _problem(tmp_path, model, endpoint)
