"""What the workloads a stack applies to its EKS cluster do with AWS, read from the stack's Kubernetes manifests
(aws_eks_v2 KubernetesResource): the images their nodes pull, the S3 prefixes the Mountpoint driver mounts and the
secrets their service accounts read. Used by `mlstack.access.finders` for node roles and pod identities.
"""

from __future__ import annotations

import json
from typing import Any

from mlstack.access.model import Facts
from mlstack.access.principals import Finder

__all__ = ["MOUNTPOINT_DRIVER", "manifests", "pod_specs", "workload_facts", "workload_images"]

MOUNTPOINT_DRIVER = "s3.csi.aws.com"


def manifests(f: Finder, stack: str) -> list[dict[str, Any]]:
    """Every Kubernetes object the stack applies (aws_eks_v2 KubernetesResource `Manifest`, a JSON list)."""
    found: list[dict[str, Any]] = []
    for r in f.stacks.resources(stack).values():
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            try:
                found += json.loads(f.stacks.text(stack, r["Properties"]["Manifest"]))
            except (ValueError, KeyError):
                continue
    return found


def workload_images(f: Finder, stack: str) -> list[str]:
    """The ECR images of the Deployments the stack applies (containers and init containers), once each."""
    found: list[str] = []
    for obj in manifests(f, stack):
        for spec in pod_specs(obj):
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                image = str(container.get("image", ""))
                if ".dkr.ecr." in image and image not in found:
                    found.append(image)
    return found


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a Deployment, or of a LeaderWorkerSet's leader and workers (multi-node vLLM servers)."""
    spec, kind = obj.get("spec", {}), obj.get("kind")
    templates = [spec.get("template", {})] if kind == "Deployment" else []
    if kind == "LeaderWorkerSet":
        templates = [t for k, t in spec.get("leaderWorkerTemplate", {}).items() if k.endswith("Template")]
    return [t.get("spec", {}) for t in templates]


def workload_facts(f: Finder, stack: str, namespace: str, account: str) -> tuple[str, list[Facts]] | None:
    """What the cluster's workloads do with a service account, read from the manifests the stack applies: the
    Mountpoint driver reads every S3 prefix a `s3.csi.aws.com` volume mounts; a pod of `account` reads the Secrets
    Manager secret its containers name in `SECRET_ARN`."""
    objects = manifests(f, stack)
    if account == "s3-csi-driver-sa" and namespace == "kube-system":
        parts: list[Facts] = []
        for pv in objects:
            csi = pv.get("spec", {}).get("csi", {}) if pv.get("kind") == "PersistentVolume" else {}
            if csi.get("driver") != MOUNTPOINT_DRIVER:
                continue
            bucket = csi.get("volumeAttributes", {}).get("bucketName", "")
            prefix = next((o[7:] for o in pv["spec"].get("mountOptions", []) if o.startswith("prefix ")), "")
            parts.append(f.s3(f"s3://{bucket}/{prefix}", prefix=True, kind="in"))
        return ("mountpoint-s3", parts) if parts else None
    parts = []
    for obj in objects:
        for spec in pod_specs(obj):
            if obj.get("metadata", {}).get("namespace") != namespace or spec.get("serviceAccountName") != account:
                continue
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                for env in container.get("env", []):
                    if env.get("name") == "SECRET_ARN":
                        secret = str(env.get("value"))
                        parts.append({"secrets": [{"secret": secret}], "secret_keys": f.secret_keys(secret)})
    return ("secret-reader", parts) if parts else None
