"""The CRD schemas of the pinned Karpenter, Kueue and LeaderWorkerSet releases, for validating the manifests mlstack
renders.

The CRDs are upstream files, not copied into this repository: they are read from a cache directory
(`MLSTACK_CRD_CACHE`, default `~/.cache/mlstack/crds`) and fetched into it from the release tags when missing (needs
the network once). Without either, the tests that need them are skipped with the command that fills the cache.
Objects are checked strictly (unknown fields are errors, as `kubectl apply --validate=strict` reports them), which
the API server would otherwise prune silently.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.constructs.training import versions

_KARPENTER = f"https://raw.githubusercontent.com/aws/karpenter-provider-aws/v{versions.KARPENTER.version}/pkg/apis/crds"
_KUEUE = (
    f"https://raw.githubusercontent.com/kubernetes-sigs/kueue/v{versions.KUEUE.version}/config/components/crd/bases"
)
_LWS_VERSION = versions.LWS.version.removeprefix("v")
_LWS = f"https://raw.githubusercontent.com/kubernetes-sigs/lws/v{_LWS_VERSION}/config/crd/bases"
SOURCES: dict[str, tuple[str, str]] = {
    "LeaderWorkerSet": (f"lws-{_LWS_VERSION}", f"{_LWS}/leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
    "NodePool": (f"karpenter-{versions.KARPENTER.version}", f"{_KARPENTER}/karpenter.sh_nodepools.yaml"),
    "EC2NodeClass": (f"karpenter-{versions.KARPENTER.version}", f"{_KARPENTER}/karpenter.k8s.aws_ec2nodeclasses.yaml"),
    "NodeOverlay": (f"karpenter-{versions.KARPENTER.version}", f"{_KARPENTER}/karpenter.sh_nodeoverlays.yaml"),
    **{
        kind: (f"kueue-{versions.KUEUE.version}", f"{_KUEUE}/kueue.x-k8s.io_{plural}.yaml")
        for kind, plural in {
            "ClusterQueue": "clusterqueues",
            "LocalQueue": "localqueues",
            "ResourceFlavor": "resourceflavors",
            "WorkloadPriorityClass": "workloadpriorityclasses",
            "Topology": "topologies",
        }.items()
    },
}


def cache_dir() -> Path:
    return Path(os.environ.get("MLSTACK_CRD_CACHE", Path.home() / ".cache" / "mlstack" / "crds"))


def crd(kind: str) -> dict[str, Any]:
    folder, url = SOURCES[kind]
    path = cache_dir() / folder / url.rsplit("/", 1)[1].replace("kueue.x-k8s.io_", "")
    if not path.exists():
        try:
            with urllib.request.urlopen(url, timeout=20) as response:
                body = response.read()
        except OSError as err:
            pytest.skip(f"CRD of {kind} not cached at {path} and not fetchable ({err}); fetch {url} there")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    return schema


def schema(kind: str, api_version: str) -> dict[str, Any]:
    """The strict JSON schema of `kind` at `api_version` (`group/version`)."""
    definition = crd(kind)
    group, _, version = api_version.partition("/")
    assert definition["spec"]["group"] == group, f"{kind}: group {group} is not the CRD's {definition['spec']['group']}"
    served = {v["name"]: v for v in definition["spec"]["versions"] if v.get("served")}
    assert version in served, f"{kind}: version {version} is not served (served: {', '.join(served)})"
    out: dict[str, Any] = _strict(served[version]["schema"]["openAPIV3Schema"])
    out["properties"]["metadata"] = {"type": "object"}
    return out
