"""Check that every pinned Helm chart version exists where the kubectl handler will pull it from.

Needs the network (`make check-charts`), so it is not part of `make test`; run it after bumping a version in
`versions.py`. An `https://` repository is checked through its `index.yaml`; an `oci://` reference through the
registry's OCI distribution API (`GET /v2/<name>/manifests/<version>`, with an anonymous pull token when the
registry asks for one, as public.ecr.aws and ghcr.io do).
"""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request
from typing import Any

import yaml

from mlstack.constructs.training import versions

_MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


def oci_parts(reference: str) -> tuple[str, str]:
    """`oci://public.ecr.aws/neuron/neuron-helm-chart` -> (`public.ecr.aws`, `neuron/neuron-helm-chart`)."""
    if not reference.startswith("oci://"):
        raise ValueError(f"{reference!r} is not an oci:// reference")
    host, _, name = reference.removeprefix("oci://").partition("/")
    if not host or not name:
        raise ValueError(f"{reference!r} lacks a registry host or a repository name")
    return host, name


def index_has(index: dict[str, Any], chart: str, version: str) -> bool:
    """Whether a Helm repository `index.yaml` lists `chart` at `version` (with or without a leading `v`)."""
    wanted = {version, version.removeprefix("v")}
    return any(str(entry.get("version")) in wanted for entry in index.get("entries", {}).get(chart, []))


def token_url(challenge: str, name: str) -> str:
    """The token URL of a `WWW-Authenticate: Bearer realm=...,service=...` challenge, for pulling `name`."""
    fields = dict(_CHALLENGE.findall(challenge))
    service = f"&service={fields['service']}" if "service" in fields else ""
    return f"{fields['realm']}?scope=repository:{name}:pull{service}"


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
        return body


def check(chart: versions.Chart) -> str | None:
    """None when the version exists, else a one-line problem."""
    try:
        if chart.repository.startswith("oci://"):
            host, name = oci_parts(chart.repository)
            url = f"https://{host}/v2/{name}/manifests/{chart.version}"
            headers = {"Accept": _MANIFEST_TYPES}
            try:
                _get(url, headers)
            except urllib.error.HTTPError as err:
                if err.code != 401:
                    raise
                token = json.loads(_get(token_url(err.headers.get("WWW-Authenticate", ""), name)))
                _get(url, {**headers, "Authorization": f"Bearer {token.get('token') or token.get('access_token')}"})
            return None
        index = yaml.safe_load(_get(chart.repository.rstrip("/") + "/index.yaml"))
        if index_has(index, chart.chart, chart.version):
            return None
        return f"{chart.chart} {chart.version} is not in {chart.repository}/index.yaml"
    except (urllib.error.URLError, OSError, ValueError, KeyError) as err:
        return f"{chart.chart} {chart.version} at {chart.repository}: {err}"


CHARTS = (
    versions.NVIDIA_DEVICE_PLUGIN,
    versions.NEURON_HELM_CHART,
    versions.EFA_DEVICE_PLUGIN,
    versions.KUBEFLOW_TRAINER,
    versions.KARPENTER_CRD,
    versions.KARPENTER,
    versions.KUEUE,
    versions.KEDA,
    versions.LWS,
)
"""Every `versions.Chart` pin (tests hold this list to the module)."""


def main() -> int:
    charts = CHARTS
    # Per chart, not by name: "karpenter" is part of "karpenter-crd".
    found = {c.release: check(c) for c in charts}
    problems = [p for p in found.values() if p]
    for chart in charts:
        print(f"{chart.chart} {chart.version}: {'missing' if found[chart.release] else 'found'}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
