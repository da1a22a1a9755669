"""The real `npx cdk` CLI, offline and without credentials: list, synth one stack, and a bad blueprint."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
from pathlib import Path

from tests.synth import ROOT

_NO_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def _cdk(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _NO_CREDENTIALS}
    env.update(
        PATH=f"{ROOT / 'node_modules' / '.bin'}:{os.environ['PATH']}",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        CDK_DISABLE_CLI_TELEMETRY="true",
    )
    return subprocess.run(
        ["npx", "--no-install", "cdk", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_cdk_synth_network_stack_and_list_offline(tmp_path: Path) -> None:
    out = tmp_path / "synth.out"
    synth = _cdk("synth", "NetworkStack", "--quiet", "--output", str(out))
    assert synth.returncode == 0, synth.stderr
    assert "Node 20 is end-of-life" not in synth.stderr  # the project's Node 22 is the one that ran
    assert (out / "NetworkStack.template.json").is_file()
    # app.py registers CDK's template validation with its worker, and CDKMetadata's analytics name it as CDK names
    # its own plugin, with the engine's version and rule IDs (a difference would change every deployed stack).
    analytics = json.loads((out / "NetworkStack.template.json").read_text())["Resources"]["CDKMetadata"]
    decoded = gzip.decompress(base64.b64decode(analytics["Properties"]["Analytics"].split(":", 2)[2])).decode()
    rules = re.search(r"(\d+\.\d+\.\d+)!policyValidation\.CloudFormationValidate\.([A-Z0-9|]+)", decoded)
    assert rules is not None, decoded
    assert rules.group(1) != "0.0.0" and len(rules.group(2).split("|")) > 100
    # `cdk list` on the assembly just written: the same stacks, without synthesizing the app a second time.
    listed = _cdk("list", "--app", str(out))
    assert listed.returncode == 0, listed.stderr
    assert {"NetworkStack", "TrainingClusterStack"} <= set(listed.stdout.split())


def test_cdk_synth_with_a_bad_blueprint_prints_the_problem_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("description: bad\nnetwork: {cidr: 10.0.0.0/33}\n")
    result = _cdk("synth", "-c", f"blueprint={bad}", "--quiet", "--output", str(tmp_path / "out"))
    assert result.returncode != 0
    assert f"error: {bad}: network.cidr:" in result.stderr
    assert "Traceback" not in result.stderr
