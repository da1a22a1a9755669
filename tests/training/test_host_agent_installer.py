"""The script that installs the CloudWatch agent on Batch and HyperPod Slurm GPU hosts
(runtime/host_metrics/install_cloudwatch_agent.sh), run with stand-ins for the package tools, systemd, curl and
nvidia-smi (and the real gpg for the signature check): which package it fetches, that it installs only a package
signed by the agent's key, that it keeps a new-enough agent and another configuration already on the host, and
that it leaves hosts without GPUs alone (its failure reports: test_host_agent_failures.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mlstack.config import load
from mlstack.constructs.training.host_agent import HOST_AGENT_SCRIPT
from mlstack.design.host_metrics import agent_config
from tests.training.host_agent_host import BASE, FINGERPRINT, VALIDSIG, VERSION
from tests.training.host_agent_host import host as _host
from tests.training.host_agent_host import run as _run


def test_installer_on_ubuntu_installs_the_pinned_signed_deb_and_starts_the_agent(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=2)
    _run(tmp_path, env)
    calls = log.read_text().splitlines()
    fetched = [c.rsplit(" ", 1)[1] for c in calls if c.startswith("curl ")]
    assert fetched == [
        f"{BASE}/ubuntu/amd64/{VERSION}/amazon-cloudwatch-agent.deb",
        f"{BASE}/ubuntu/amd64/{VERSION}/amazon-cloudwatch-agent.deb.sig",
        f"{BASE}/assets/amazon-cloudwatch-agent.gpg",
    ]
    verify = [c for c in calls if c.startswith("gpg ") and "--verify" in c]
    assert len(verify) == 1 and verify[0].endswith("amazon-cloudwatch-agent.deb")
    assert calls.index(verify[0]) < next(i for i, c in enumerate(calls) if c.startswith("dpkg -i -E "))
    assert not any(c.startswith("rpm ") for c in calls)
    assert "systemctl enable --now mlstack-kernel-log.service" in calls
    written = root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json"
    # Nothing else in amazon-cloudwatch-agent.d: fetch-config (which replaces that directory's files).
    assert f"ctl -a fetch-config -m ec2 -s -c file:{written}" in calls
    assert "ctl -a status" in calls
    assert "efa" in json.loads(written.read_text())["metrics"]["metrics_collected"]
    unit = (root / "etc/systemd/system/mlstack-kernel-log.service").read_text()
    assert "ExecStart=/usr/bin/journalctl --dmesg --boot --follow --no-tail" in unit
    assert "--cursor-file=/var/lib/mlstack/kernel-log.cursor" in unit
    assert "StandardOutput=append:/var/log/mlstack/kernel.log" in unit
    rotate = (root / "etc/logrotate.d/mlstack-kernel-log").read_text()
    assert rotate.startswith("/var/log/mlstack/kernel.log {") and "copytruncate" in rotate


def test_installer_takes_the_latest_release_when_the_pinned_build_is_not_served(tmp_path: Path) -> None:
    _root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=0)
    curl = Path(env["PATH"]) / "curl"
    # A 404 for the pinned build's path (curl -f exits 22), the files of `latest` served.
    curl.write_text(curl.read_text() + f'[[ "$*" == *"/{VERSION}/"* ]] && exit 22\ntrue\n')
    result = _run(tmp_path, env)
    calls = log.read_text().splitlines()
    fetched = [c.rsplit(" ", 1)[1] for c in calls if c.startswith("curl ")]
    assert fetched == [
        f"{BASE}/ubuntu/amd64/{VERSION}/amazon-cloudwatch-agent.deb",
        f"{BASE}/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb",
        f"{BASE}/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb.sig",
        f"{BASE}/assets/amazon-cloudwatch-agent.gpg",
    ]
    assert "the latest release instead" in result.stdout
    assert any(c.startswith("dpkg -i -E ") for c in calls)


def test_installer_refuses_a_package_without_a_valid_signature_by_the_agents_key(tmp_path: Path) -> None:
    wrong = VALIDSIG.replace(FINGERPRINT, "0" * 40)
    for n, signature in enumerate(("[GNUPG:] BADSIG D58167303B789C72 Amazon CloudWatch Agent", wrong)):
        (tmp_path / str(n)).mkdir()
        _, env, log = _host(tmp_path / str(n), gpu=True, deb=True, efa_devices=0, signature=signature)
        result = _run(tmp_path / str(n), env, ok=False)
        assert "not installed" in result.stdout
        calls = log.read_text().splitlines()
        assert not any(c.startswith(("dpkg ", "rpm ", "ctl ")) for c in calls)


def _signed_downloads(tmp_path: Path, *, tamper: bool) -> tuple[Path, str]:
    """A key of our own (the real gpg), a package signed by it and its public key, as the bucket would serve them;
    returns the folder and the key's fingerprint."""
    home, served = tmp_path / "signer", tmp_path / "served"
    home.mkdir(mode=0o700)
    served.mkdir()
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", "test <t@example.com>", "ed25519", "sign", "never"], check=True)
    listing = subprocess.run([*gpg, "--with-colons", "--fingerprint"], capture_output=True, text=True, check=True)
    fingerprint = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    package = served / "amazon-cloudwatch-agent.deb"
    package.write_bytes(b"a package")
    subprocess.run([*gpg, "--detach-sign", "-o", str(served / "amazon-cloudwatch-agent.deb.sig"), str(package)])
    subprocess.run([*gpg, "--export", "-o", str(served / "amazon-cloudwatch-agent.gpg")], check=True)
    # Signing started a gpg-agent for this home: stop it, or every test run leaves one behind.
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    if tamper:
        package.write_bytes(b"another package")
    return served, fingerprint


@pytest.mark.skipif(
    shutil.which("gpg") is None or shutil.which("gpgconf") is None,
    reason="GnuPG is not installed here (Debian package gpg); the stand-in tests above still check the flow",
)
@pytest.mark.parametrize("tamper", [False, True])
def test_installer_signature_check_with_the_real_gpg(tmp_path: Path, tamper: bool) -> None:
    """The check as the host runs it (gpg's --status-fd VALIDSIG line), on a package signed by a key whose
    fingerprint the script pins; a package changed after signing is not installed."""
    served, fingerprint = _signed_downloads(tmp_path, tamper=tamper)
    _, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=0)
    bin_dir = Path(env["PATH"])
    (bin_dir / "gpg").unlink()
    (bin_dir / "gpg").symlink_to(
        subprocess.run(["bash", "-c", "command -v gpg"], capture_output=True, text=True, check=True).stdout.strip()
    )
    (bin_dir / "curl").write_text(
        f'#!/bin/bash\necho "curl $*" >>{log}\nwhile [[ $# -gt 1 ]]; do [[ $1 == -o ]] && out=$2; shift; done\n'
        f'/bin/cp "{served}/${{1##*/}}" "$out"\n'
    )
    script = tmp_path / "install.sh"
    text = HOST_AGENT_SCRIPT.read_text(encoding="utf-8")
    assert f'KEY_FINGERPRINT="{FINGERPRINT}"' in text
    script.write_text(text.replace(FINGERPRINT, fingerprint))
    config = load("batch-training")
    assert config.training is not None
    source = tmp_path / "cloudwatch_agent.json"
    source.write_text(json.dumps(agent_config(config, config.training)))
    result = subprocess.run(["bash", str(script), str(source)], env=env, capture_output=True, text=True, check=False)
    installed = any(c.startswith("dpkg -i -E ") for c in log.read_text().splitlines())
    assert (result.returncode == 0, installed) == (not tamper, not tamper), result.stdout + result.stderr


def test_installer_on_amazon_linux_uses_the_rpm_and_drops_efa_without_devices(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=False, efa_devices=0)
    _run(tmp_path, env)
    calls = log.read_text().splitlines()
    assert any(c.endswith(f"/amazon_linux/amd64/{VERSION}/amazon-cloudwatch-agent.rpm") for c in calls)
    assert any(c.startswith("rpm -U ") for c in calls)
    written = json.loads((root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json").read_text())
    assert sorted(written["metrics"]["metrics_collected"]) == ["nvidia_gpu"]


@pytest.mark.parametrize(
    ("installed", "reinstalls"),
    [("1.300068.0b1491", False), ("1.300071.0b1720", False), ("1.300067.0b1400", True), ("1.247359.0", True)],
)
def test_installer_keeps_an_agent_new_enough_for_the_efa_section(
    tmp_path: Path, installed: str, reinstalls: bool
) -> None:
    _, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=1, installed=installed)
    result = _run(tmp_path, env)
    calls = log.read_text().splitlines()
    assert any(c.startswith(("curl ", "gpg ", "dpkg ")) for c in calls) is reinstalls
    assert ("already installed" in result.stdout) is not reinstalls
    assert any(c.startswith("ctl -a fetch-config ") for c in calls)


def _agent_dir(root: Path) -> Path:
    d = root / "opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.d"
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_installer_appends_to_a_configuration_already_on_the_host(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=0, installed="1.300071.0b1720")
    platform = {
        "agent": {"region": "us-east-1"},
        "logs": {"logs_collected": {"files": {"collect_list": [{"file_path": "/var/log/provision.log"}]}}},
    }
    (_agent_dir(root) / "file_hyperpod.json").write_text(json.dumps(platform))
    (_agent_dir(root) / "file_odd.json").write_text("[1]")  # not an object: not read for clashes
    _run(tmp_path, env)
    written = root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json"
    calls = log.read_text().splitlines()
    assert f"ctl -a append-config -m ec2 -s -c file:{written}" in calls
    assert not any("fetch-config" in c for c in calls)
    assert "metrics" in json.loads(written.read_text())  # no clash: the GPU metrics go too


def test_installer_replaces_only_its_own_file_with_fetch_config(tmp_path: Path) -> None:
    root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=0, installed="1.300071.0b1720")
    (_agent_dir(root) / "file_mlstack.json").write_text("{}")  # a second run on the same host
    _run(tmp_path, env)
    assert any(c.startswith("ctl -a fetch-config ") for c in log.read_text().splitlines())


def test_installer_leaves_out_metrics_another_configuration_sets_differently(tmp_path: Path) -> None:
    """One metrics namespace per host (metrics.namespace is top-level only in the agent's schema), and the agent's
    merge refuses two values for one key: ours keeps the kernel log and leaves the metrics to the other file."""
    root, env, log = _host(tmp_path, gpu=True, deb=True, efa_devices=0, installed="1.300071.0b1720")
    platform = {
        "agent": {"metrics_collection_interval": 300},
        "metrics": {"namespace": "/aws/sagemaker/Clusters", "metrics_collected": {"mem": {"measurement": ["used"]}}},
    }
    (_agent_dir(root) / "file_hyperpod.json").write_text(json.dumps(platform))
    result = _run(tmp_path, env)
    assert "sets namespace differently: no GPU/EFA metrics from this host" in result.stdout
    written = json.loads((root / "opt/aws/amazon-cloudwatch-agent/etc/mlstack.json").read_text())
    assert "metrics" not in written and written["agent"] == {"region": "us-east-1"}
    assert written["logs"]["logs_collected"]["files"]["collect_list"][0]["file_path"] == "/var/log/mlstack/kernel.log"
    assert any(c.startswith("ctl -a append-config ") for c in log.read_text().splitlines())


@pytest.mark.parametrize("gpu", [None, False])
def test_installer_leaves_a_host_without_gpus_alone(tmp_path: Path, gpu: bool | None) -> None:
    root, env, log = _host(tmp_path, gpu=gpu, deb=True, efa_devices=0)
    result = _run(tmp_path, env)
    assert "lists no GPU" in result.stdout
    assert [c for c in (log.read_text().splitlines() if log.exists() else []) if not c.startswith("nvidia-smi")] == []
    assert not (root / "etc").exists()
