"""A Batch job stopped by the scale-down (TerminateJob) or a Capacity Block's end gets the same window to checkpoint
as an EKS pod: the ECS agent's container stop timeout is the pods' grace period, and the launcher in the container
waits 30 s less for its workers."""

from __future__ import annotations

import email
import email.message
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlstack.workloads import resilience
from tests.conftest import selected_blueprints
from tests.synth import Session

BLUEPRINT = "batch-training"
STACK = "TrainingClusterStack"


@pytest.fixture(scope="module")
def template(session: Session) -> dict[str, Any]:
    if BLUEPRINT not in selected_blueprints():
        pytest.skip(f"{BLUEPRINT} not selected by MLSTACK_TEST_BLUEPRINTS")
    return dict(session.blueprints[BLUEPRINT].templates[STACK])


def _one(template: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    return dict(found["Properties"])


def _parts(template: dict[str, Any]) -> list[str]:
    data = _one(template, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else f"<{json.dumps(p)}>" for p in data)
    message = email.message_from_string(text)
    assert message.is_multipart()
    return [str(p.get_payload()) for p in message.get_payload() if isinstance(p, email.message.Message)]


def test_the_ecs_agent_waits_the_pods_grace_before_sigkill(template: dict[str, Any], tmp_path: Path) -> None:
    (part,) = [p for p in _parts(template) if "ECS_CONTAINER_STOP_TIMEOUT" in p]
    assert resilience.TERMINATION_GRACE_S == 300
    # Run the part as cloud-init would, against a copy of the agent's config file.
    config = tmp_path / "ecs.config"
    config.write_text("ECS_CLUSTER=batch-ce\n")
    script = tmp_path / "part.sh"
    script.write_text(part.replace("/etc/ecs/ecs.config", str(config)))
    subprocess.run(["bash", "-euo", "pipefail", str(script)], check=True)
    assert config.read_text() == "ECS_CLUSTER=batch-ce\nECS_CONTAINER_STOP_TIMEOUT=300s\n"


def test_the_launcher_in_the_container_holds_its_workers_inside_that_timeout(template: dict[str, Any]) -> None:
    job = _one(template, "AWS::Batch::JobDefinition")
    env = {e["Name"]: e["Value"] for e in job["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Environment"]}
    # runtime/workloads/elastic.py reads it (its own window on every torch, 2.7.1 included).
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(resilience.SHUTDOWN_TIMEOUT_S) == "270"


def test_the_stop_timeout_part_is_its_own_mime_part_and_bounded() -> None:
    from mlstack.constructs.training.batch_user_data import stop_timeout_part

    part = "".join(stop_timeout_part(120))
    assert part.count("Content-Type: text/x-shellscript") == 1 and "ECS_CONTAINER_STOP_TIMEOUT=120s" in part
    with pytest.raises(ValueError, match="stop timeout 0s: must be 1 to 3600 seconds"):
        stop_timeout_part(0)
