"""An AWS Batch job's command as the container really starts it: Docker runs ENTRYPOINT + CMD, and a Batch job
definition's `command` replaces only CMD (ContainerProperties has no entry point), so the image's ENTRYPOINT stays.

The AWS Deep Learning Container `-ec2` images that train.Dockerfile and nccl-tests.Dockerfile build on set
`ENTRYPOINT ["bash", "-m", "dockerd_entrypoint.sh"]`, a script that ends in `eval "$@"`
(aws/deep-learning-containers, pytorch/training/docker/2.7/py3/cu128/Dockerfile.gpu, ec2 stage). These tests run
the synthesized Command through the entry point each Dockerfile leaves in force (a stand-in for that script when it
inherits the base's) with bash, and check that the launcher runs with the expanded Batch variables as the
container's first process (where `docker stop`'s SIGTERM arrives)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlstack import resources
from mlstack.constructs.training.batch import DEFAULT_SCRIPT, torchrun_command
from mlstack.workloads.nccl_batch import NODE_SCRIPT
from tests.conftest import selected_blueprints
from tests.synth import Session

BLUEPRINT = "batch-training"
DLC_ENTRYPOINT = ["bash", "-m", "dockerd_entrypoint.sh"]
"""The base image's ENTRYPOINT; its script's telemetry and CUDA-compat lines need the image, its last line is kept."""
DLC_ENTRY_SCRIPT = 'eval "$@"\n'
BATCH_ENV = {
    "AWS_BATCH_JOB_NUM_NODES": "2",
    "AWS_BATCH_JOB_NODE_INDEX": "1",
    "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.5",
    "AWS_BATCH_JOB_ID": "a1b2#1",
}


def entrypoint(dockerfile: str) -> list[str]:
    """The image's ENTRYPOINT: the Dockerfile's last (exec form), else the one it inherits from the DLC base."""
    found: list[str] | None = None
    for line in resources.runtime_path("containers", dockerfile).read_text(encoding="utf-8").splitlines():
        if line.startswith("ENTRYPOINT"):
            found = json.loads(line.removeprefix("ENTRYPOINT"))
    return DLC_ENTRYPOINT if found is None else found


def start(dockerfile: str, command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Start the container's process as Docker would (ENTRYPOINT + CMD), `python` being a shim that records its
    argv and whether it is that first process (same PID: every shell on the way exec'd)."""
    (tmp_path / "dockerd_entrypoint.sh").write_text(DLC_ENTRY_SCRIPT, encoding="utf-8")
    shim = tmp_path / "bin" / "python"
    shim.parent.mkdir()
    record = tmp_path / "launched.json"
    shim.write_text(
        f'#!/usr/bin/env bash\nprintf \'%s\\n\' "$$" "$@" > {record}\n',
        encoding="utf-8",
    )
    shim.chmod(0o755)
    argv = [*entrypoint(dockerfile), *command]
    environment = {**os.environ, **BATCH_ENV, **env, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    process = subprocess.Popen(
        argv, cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess([str(process.pid)], process.returncode, out, err)


def _launched(result: subprocess.CompletedProcess[str], tmp_path: Path) -> list[str]:
    record = tmp_path / "launched.json"
    assert record.exists(), f"the launcher never ran (rc={result.returncode}, stderr={result.stderr!r})"
    pid, *argv = record.read_text(encoding="utf-8").splitlines()
    assert pid == result.args[0], "the launcher is not the container's first process: SIGTERM would not reach it"
    return argv


def _check_launcher(command: list[str], tmp_path: Path) -> None:
    argv = _launched(start("train.Dockerfile", command, tmp_path), tmp_path)
    assert argv[0] == "/opt/mlstack/runtime/workloads/elastic.py"
    assert {"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.5"} <= set(argv)
    assert argv[argv.index(DEFAULT_SCRIPT) :] == [DEFAULT_SCRIPT, "--checkpoint-dir", "/fsx/checkpoints/a1b2"]


def test_the_train_image_starts_the_job_command_itself() -> None:
    assert entrypoint("train.Dockerfile") == []
    assert entrypoint("nccl-tests.Dockerfile") == []


def test_the_batch_command_runs_the_launcher_as_the_first_process(tmp_path: Path) -> None:
    command = torchrun_command(
        DEFAULT_SCRIPT,
        8,
        launcher=("python", "/opt/mlstack/runtime/workloads/elastic.py"),
        script_args=["--checkpoint-dir", "/fsx/checkpoints/${AWS_BATCH_JOB_ID%#*}"],
    )
    _check_launcher(command, tmp_path)


@pytest.fixture(scope="module")
def node_commands(session: Session) -> list[list[str]]:
    if BLUEPRINT not in selected_blueprints():
        pytest.skip(f"{BLUEPRINT} not selected by MLSTACK_TEST_BLUEPRINTS")
    template: dict[str, Any] = session.blueprints[BLUEPRINT].templates["TrainingClusterStack"]
    (job,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"]
    return [n["Container"]["Command"] for n in job["Properties"]["NodeProperties"]["NodeRangeProperties"]]


def test_the_synthesized_job_definition_runs_the_launcher_on_every_node(
    node_commands: list[list[str]], tmp_path: Path
) -> None:
    for i, command in enumerate(node_commands):
        (tmp_path / str(i)).mkdir()
        argv = _launched(start("train.Dockerfile", command, tmp_path / str(i)), tmp_path / str(i))
        assert argv[0] == "/opt/mlstack/runtime/workloads/elastic.py"
        assert {"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.5"} <= set(argv)
        assert "/fsx/checkpoints/a1b2" in argv


def test_the_nccl_tests_node_script_runs_whole(tmp_path: Path) -> None:
    # Without GPUS_PER_NODE the script's first check stops it: proof that bash got the script as one -c argument.
    result = start("nccl-tests.Dockerfile", ["bash", "-c", NODE_SCRIPT.read_text(encoding="utf-8")], tmp_path)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()  # under `eval` bash also says "-c: option requires an argument"
    assert line.endswith("GPUS_PER_NODE: parameter null or not set"), result.stderr
