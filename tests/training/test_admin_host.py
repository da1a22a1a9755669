"""The admin host's first use: `aws ssm start-session` opens a non-login `sh` as ssm-user (no /etc/profile.d), and
`kubectl get nodes` and the FirstJobCommand pipeline must still reach the cluster.

The user data is taken from each synthesized template, shellchecked, then run in a temp dir with stub `curl` and
`aws` (no network) and the real `sha256sum`; its kubectl is then called the way a Session Manager shell calls it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.plan import build_plan
from tests.conftest import selected_blueprints
from tests.synth import ROOT, Session

ADMIN_HOST = [
    n
    for n in selected_blueprints()
    if (t := load(BLUEPRINTS_DIR / f"{n}.yaml").training) is not None
    and t.engine in ("eks", "hyperpod-eks")
    and t.cluster.admin_host
]

FAKE_KUBECTL = '#!/bin/sh\necho "kubectl KUBECONFIG=${KUBECONFIG:-unset} $*"\n'

STUB_CURL = """#!/bin/sh
# curl -fsSL URL | curl -fsSLo FILE URL, as the user data calls it.
out=""; url=""
while [ $# -gt 0 ]; do
  case "$1" in
    -fsSLo) out="$2"; shift 2 ;;
    -*) shift ;;
    *) url="$1"; shift ;;
  esac
done
case "$url" in
  */stable-*.txt) printf 'v1.35.9' ;;
  */kubectl.sha256) printf '%s' "$STUB_SHA256" ;;
  */kubectl) printf '%s' "$STUB_KUBECTL" > "$out" ;;
  *) echo "unexpected URL $url" >&2; exit 22 ;;
esac
"""

STUB_AWS = """#!/bin/sh
# aws eks update-kubeconfig ... --kubeconfig FILE
while [ $# -gt 0 ]; do
  if [ "$1" = --kubeconfig ]; then echo "apiVersion: v1" > "$2"; exit 0; fi
  shift
done
exit 1
"""


def _user_data(template: dict[str, Any]) -> str:
    (instance,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Instance"]
    parts = instance["Properties"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "my-cluster" for p in parts)


def _stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _run_user_data(tmp_path: Path, script: str, sha256: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path / "root"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "etc/profile.d").mkdir(parents=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    _stub(stubs / "curl", STUB_CURL)
    _stub(stubs / "aws", STUB_AWS)
    # The script's absolute paths, moved under the temp root.
    local = script.replace("/usr/local/", f"{root}/usr/local/").replace("/etc/", f"{root}/etc/")
    (tmp_path / "user-data.sh").write_text(local)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "STUB_KUBECTL": FAKE_KUBECTL,
        "STUB_SHA256": sha256,
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "user-data.sh")], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    return done, root


def _session_shell(root: Path, command: str, **env: str) -> str:
    """What `aws ssm start-session` gives ssm-user: `sh`, no login, no profile, the agent's PATH."""
    path = f"{root}/usr/local/bin:/usr/bin:/bin"
    done = subprocess.run(
        ["sh", "-c", command], env={"PATH": path, **env}, capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout


@pytest.fixture(params=ADMIN_HOST)
def user_data(request: pytest.FixtureRequest, session: Session) -> str:
    return _user_data(session.blueprints[request.param].templates["TrainingClusterStack"])


def test_user_data_passes_shellcheck(user_data: str, tmp_path: Path) -> None:
    script = tmp_path / "user-data.sh"
    script.write_text(user_data)
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    done = subprocess.run([shellcheck, "-s", "bash", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_kubectl_finds_the_kubeconfig_in_a_session_manager_shell(user_data: str, tmp_path: Path) -> None:
    done, root = _run_user_data(tmp_path, user_data, hashlib.sha256(FAKE_KUBECTL.encode()).hexdigest())
    assert done.returncode == 0, done.stderr
    kubeconfig = root / "etc/mlstack/kubeconfig"
    assert kubeconfig.is_file()
    assert _session_shell(root, "kubectl get nodes").strip() == f"kubectl KUBECONFIG={kubeconfig} get nodes"
    # The FirstJobCommand output: both ends of the pipe are the wrapper.
    first_job = "kubectl -n training get configmap mlstack-job | kubectl apply -f -"
    assert _session_shell(root, first_job).strip() == f"kubectl KUBECONFIG={kubeconfig} apply -f -"
    # A KUBECONFIG the admin sets is kept.
    assert _session_shell(root, "kubectl version", KUBECONFIG="/tmp/other").strip() == (
        "kubectl KUBECONFIG=/tmp/other version"
    )


def test_a_kubectl_download_with_the_wrong_checksum_stops_the_user_data(user_data: str, tmp_path: Path) -> None:
    done, root = _run_user_data(tmp_path, user_data, "0" * 64)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr
    assert not (root / "usr/local/bin/kubectl").exists()
    assert not (root / "etc/mlstack/kubeconfig").exists()


def test_no_helm_is_promised_on_the_admin_host() -> None:
    """The user data installs kubectl only; the blueprints must not say the admin host has helm."""
    for name in ADMIN_HOST:
        for line in (BLUEPRINTS_DIR / f"{name}.yaml").read_text().splitlines():
            if "admin_host:" in line:
                assert "helm" not in line, f"{name}: {line.strip()}"


def test_the_readme_log_command_follows_every_node() -> None:
    """kubectl logs -f -l follows at most 5 pods unless --max-log-requests says more; eks-gpu allows 8 nodes."""
    section = (ROOT / "README.md").read_text().split("### First job on EKS", 1)[1].split("```bash", 1)[1]
    (logs,) = [line for line in section.split("```", 1)[0].splitlines() if " logs -f " in line]
    requests = int(logs.split("--max-log-requests=", 1)[1].split()[0])
    for name in ("eks-gpu-training", "eks-p4d-training", "eks-g6e-training"):  # the blueprints the section names
        training = load(BLUEPRINTS_DIR / f"{name}.yaml").training
        assert training is not None and requests >= training.max_nodes, name


def test_the_plan_names_the_single_nat_gateway_as_the_only_egress() -> None:
    for name in ADMIN_HOST:
        sections = build_plan(load(BLUEPRINTS_DIR / f"{name}.yaml")).details["sections"]
        rows = [row for _, section in sections for row in section]
        assert any(row.startswith("egress: the one NAT gateway") and "ghcr.io" in row for row in rows), name
