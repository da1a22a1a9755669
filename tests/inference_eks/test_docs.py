"""The README's first use of `eks-llm-serving` and the blueprint's notes say what the deploy really does."""

from __future__ import annotations

import re

from mlstack.config import BLUEPRINTS_DIR
from tests.synth import ROOT

SECTION = (ROOT / "README.md").read_text().split("## LLM serving on EKS", 1)[1].split("\n## ", 1)[0]


def test_the_weights_upload_leaves_the_hugging_face_cache_folder_behind() -> None:
    # `hf download --local-dir` keeps its own `.cache/huggingface/` there; it does not belong under the prefix.
    (sync,) = [line for line in SECTION.splitlines() if line.startswith("aws s3 sync llama ")]
    assert "--exclude '.cache/*'" in sync


def test_the_cache_claim_matches_mountpoint_v2() -> None:
    # CSI driver v2 ends a node's Mountpoint Pod, and its emptyDir cache, once no pod there mounts the volume.
    assert "does not read S3 again" not in SECTION
    assert "reads the weights from S3 again" in re.sub(r"\s+", " ", SECTION)


def test_updates_with_one_server_are_said_to_be_an_outage() -> None:
    text = (BLUEPRINTS_DIR / "eks-llm-serving.yaml").read_text()
    assert "One server: every update" in text and "outage" in text
    assert "--api-key" not in SECTION.replace("--api-key-env", "")
