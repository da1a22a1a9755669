"""Installs the SageMaker HyperPod dependencies Helm chart on the training cluster during `cdk deploy`.

A CloudFormation custom resource (CDK provider framework, `on_event`) runs this Lambda function in the VPC before
the HyperPod cluster is created. The chart is published only as a folder of aws/sagemaker-hyperpod-cli with local
`file://` sub-charts (SageMaker HyperPod docs, "Installing packages on the Amazon EKS cluster using Helm"), so:

1. download the repository archive at the pinned commit (GitHub's tarball URL) through the NAT gateway;
2. extract the chart folder and check the SHA-256 digest of its contents (`folder_digest`) against the pin, so
   whatever GitHub serves must be exactly the reviewed tree (the archive bytes themselves are not pinned: GitHub
   does not promise byte-stable archives);
3. `helm dependency update` (the documented step: it packages the local sub-charts and fetches the remote ones);
4. `helm upgrade --install` the release, as the documented `helm install` does, and idempotent for updates and a
   release a user installed by hand earlier. Delete runs `helm uninstall`.

helm and kubectl come from the kubectl Lambda layer (/opt/helm/helm); the kubeconfig carries an EKS token made
from the function's own credentials (the presigned STS GetCallerIdentity URL that `aws eks get-token` makes), and
the function's role has a cluster-admin EKS access entry. Runs on the Lambda Python runtime; standard library and
boto3 only.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
"""The pinned archive is about 2 MB; anything far larger is not it."""
TOKEN_PREFIX = "k8s-aws-v1."


def folder_digest(folder: Path) -> str:
    """SHA-256 of a folder's contents: of the lines `<sha256 of file>  <path>` for every file, sorted by path
    (bytewise), i.e. `find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum`."""
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.relative_to(folder).as_posix())
    listing = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n" for p in files
    )
    return hashlib.sha256(listing.encode()).hexdigest()


def extract_chart(archive: bytes, chart_path: str, dest: Path) -> Path:
    """Extract `<top folder>/<chart_path>/` of a repository tarball into `dest`; return the chart folder.

    Only regular files and folders are taken, and only below the chart folder (no links, no absolute or `..`
    paths), so a tampered archive can neither write outside `dest` nor slip a link past the digest.
    """
    prefix = PurePosixPath(chart_path)
    found = False
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or member.name.startswith("/") or ".." in parts:
                continue
            inner = PurePosixPath(*parts[1:])
            if inner != prefix and prefix not in inner.parents:
                continue
            if not (member.isfile() or member.isdir()):
                raise ValueError(f"{member.name}: the chart folder holds a link or device; refusing it")
            target = dest / inner
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            target.chmod(0o755 if member.mode & 0o111 else 0o644)
            found = True
    if not found:
        raise ValueError(f"the archive has no {chart_path}/ folder")
    return dest / prefix


def download(url: str) -> bytes:
    """The archive at `url` (HTTPS only), at most MAX_ARCHIVE_BYTES."""
    if not url.startswith("https://"):
        raise ValueError(f"{url}: only https:// archives are fetched")
    with urllib.request.urlopen(url, timeout=120) as response:
        body: bytes = response.read(MAX_ARCHIVE_BYTES + 1)
    if len(body) > MAX_ARCHIVE_BYTES:
        raise ValueError(f"{url}: archive larger than {MAX_ARCHIVE_BYTES} bytes")
    return body


def eks_token(cluster_name: str, region: str) -> str:
    """An EKS bearer token for the function's credentials: a presigned STS GetCallerIdentity URL with the cluster
    name in the signed `x-k8s-aws-id` header (what `aws eks get-token` makes; valid 15 minutes)."""
    import boto3
    from botocore.signers import RequestSigner

    session = boto3.session.Session(region_name=region)
    sts = session.client("sts", region_name=region, endpoint_url=f"https://sts.{region}.amazonaws.com")
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(), session.events
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def kubeconfig(*, endpoint: str, certificate_authority: str, token: str) -> dict[str, Any]:
    """A kubeconfig for one cluster and a bearer token (JSON is valid YAML, which kubeconfig files are)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "cluster", "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority}}
        ],
        "users": [{"name": "deployer", "user": {"token": token}}],
        "contexts": [{"name": "deploy", "context": {"cluster": "cluster", "user": "deployer"}}],
        "current-context": "deploy",
    }


TRANSIENT = ("Unauthorized", "forbidden", "i/o timeout", "connection refused", "TLS handshake timeout")
"""helm errors worth a retry: a new EKS access entry takes a moment to be honoured (CDK's own kubectl provider
waits on a barrier for the same reason), and a fresh endpoint ENI or rule a moment to pass traffic."""
RETRIES = int(os.environ.get("HELM_RETRIES", "5"))
RETRY_SECONDS = float(os.environ.get("HELM_RETRY_SECONDS", "20"))


def helm(args: list[str], env: dict[str, str]) -> str:
    """Run helm; raise with its output (the CloudFormation event shows the reason) when it fails. Calls that reach
    the cluster are retried on the transient errors of a new access entry or network path."""
    for attempt in range(1, RETRIES + 1):
        done = subprocess.run([HELM, *args], env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode == 0:
            return done.stdout
        output = (done.stderr or done.stdout)[-3000:]
        if attempt == RETRIES or args[0] == "dependency" or not any(t in output for t in TRANSIENT):
            raise RuntimeError(f"helm {args[0]} failed ({done.returncode}): {output}")
        time.sleep(RETRY_SECONDS)
    raise AssertionError("unreachable")


def _env(work: Path, props: dict[str, Any]) -> dict[str, str]:
    config = work / "kubeconfig"
    token = eks_token(props["ClusterName"], props["Region"])
    config.write_text(
        json.dumps(
            kubeconfig(endpoint=props["Endpoint"], certificate_authority=props["CertificateAuthority"], token=token)
        )
    )
    config.chmod(0o600)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "KUBECONFIG": str(config),
        # Lambda's file system is read-only but for /tmp.
        "HELM_CACHE_HOME": str(work / "helm-cache"),
        "HELM_CONFIG_HOME": str(work / "helm-config"),
        "HELM_DATA_HOME": str(work / "helm-data"),
    }


def install(props: dict[str, Any], work: Path) -> dict[str, str]:
    archive = download(props["ArchiveUrl"])
    chart = extract_chart(archive, props["ChartPath"], work / "src")
    digest = folder_digest(chart)
    if digest != props["ChartSha256"]:
        raise ValueError(
            f"{props['ArchiveUrl']}: {props['ChartPath']} has SHA-256 {digest}, pinned {props['ChartSha256']}; "
            "not installing a chart that differs from the pin"
        )
    env = _env(work, props)
    helm(["dependency", "update", str(chart)], env)
    values = work / "values.json"
    # A JSON string: CloudFormation passes custom-resource properties as strings, so a nested object would lose
    # its booleans and numbers.
    values.write_text(props.get("ValuesJson") or "{}")
    helm(
        [
            "upgrade",
            "--install",
            props["Release"],
            str(chart),
            "--namespace",
            props["Namespace"],
            "--values",
            str(values),
        ],
        env,
    )
    return {"ChartSha256": digest}


def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Provider-framework entry point: Create/Update install or upgrade the release, Delete uninstalls it."""
    props = event["ResourceProperties"]
    physical_id = f"{props['Namespace']}/{props['Release']}"
    with tempfile.TemporaryDirectory(dir=os.environ.get("WORK_DIR")) as tmp:
        work = Path(tmp)
        if event["RequestType"] == "Delete":
            env = _env(work, props)
            try:
                helm(["uninstall", props["Release"], "--namespace", props["Namespace"]], env)
            except RuntimeError as err:
                if "not found" not in str(err):
                    raise
            return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id)}
        data = install(props, work)
    return {"PhysicalResourceId": physical_id, "Data": data}
