"""Karpenter NodePool and EC2NodeClass manifests of a `mlstack.design.karpenter.Pool` (karpenter.sh/v1,
karpenter.k8s.aws/v1; field names as in the CRDs of the chart pinned in `constructs/training/versions.py`).

The deploy-time names (subnet, security groups, node role, key, placement group) come in as strings: CDK tokens in
the stack, plain values in tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mlstack.design.karpenter import AMI_ALIAS, DISRUPTION_REASONS_BLOCKED, Pool

_ZONE_ID = re.compile(r"^[a-z]{2,4}\d-az\d+$")
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
"""Pod annotation: Karpenter never voluntarily disrupts a node running such a pod (Karpenter docs, Disruption)."""


@dataclass(frozen=True)
class NodeClassRefs:
    """What an EC2NodeClass points at, created by the deploy."""

    cluster_name: str
    node_role: str
    """IAM role name (Karpenter creates and manages the instance profile)."""
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    kms_key_arn: str
    placement_group: str | None = None
    user_data: str | None = None
    """EC2NodeClass `userData`: a MIME multi-part document, which Karpenter merges with its own NodeConfig on AL2023
    (Karpenter docs v1.14, "NodeClasses", spec.userData: AL2023 "MIME multi-part"; shell parts run via
    cloud-init)."""


def node_class(pool: Pool, refs: NodeClassRefs) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "role": refs.node_role,
        "amiSelectorTerms": [{"alias": AMI_ALIAS}],
        "subnetSelectorTerms": [{"id": s} for s in refs.subnet_ids],
        "securityGroupSelectorTerms": [{"id": g} for g in refs.security_group_ids],
        # IMDSv2 only; 2 hops as on the node groups (the FSx CSI node plugin and the CloudWatch agent read instance
        # metadata from their own network namespace).
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 2,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": f"{pool.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "kmsKeyID": refs.kms_key_arn,
                    "deleteOnTermination": True,
                },
            }
        ],
        "associatePublicIPAddress": False,
        "detailedMonitoring": True,
        "tags": {"mlstack.io/node-group": pool.name},
    }
    if pool.instance.has_local_nvme:
        # The same RAID0 of the instance-store disks for containerd and kubelet as the node groups' NodeConfig.
        spec["instanceStorePolicy"] = "RAID0"
    if pool.interfaces is not None:
        spec["networkInterfaces"] = [
            {"networkCardIndex": n.network_card_index, "deviceIndex": n.device_index, "interfaceType": n.interface_type}
            for n in pool.interfaces
        ]
    if pool.reservation_id is not None:
        spec["capacityReservationSelectorTerms"] = [{"id": pool.reservation_id}]
    if refs.user_data is not None:
        spec["userData"] = refs.user_data
    if refs.placement_group is not None:
        spec["placementGroupSelector"] = {"name": refs.placement_group}
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": pool.name},
        "spec": spec,
    }


def zone_label(zones: tuple[str, ...]) -> str:
    """The well-known node label of `zones`: AZ IDs (use1-az4) or names (us-east-1a), as the network lists them
    (Karpenter docs, NodePools: well-known labels `topology.k8s.aws/zone-id`, `topology.kubernetes.io/zone`)."""
    return "topology.k8s.aws/zone-id" if all(_ZONE_ID.match(z) for z in zones) else "topology.kubernetes.io/zone"


def node_pool(pool: Pool) -> dict[str, Any]:
    requirements: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(pool.instance_types)},
        {"key": zone_label(pool.zones), "operator": "In", "values": list(pool.zones)},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(pool.capacity_types)},
    ]
    limits: dict[str, str] = {}
    if pool.accelerator_resource is not None:
        limits[pool.accelerator_resource] = str(pool.limit)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(pool.labels)},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                    "requirements": requirements,
                    "taints": [{"key": k, "value": "true", "effect": "NoSchedule"} for k in pool.taints],
                    "expireAfter": "Never",
                    "terminationGracePeriod": pool.termination_grace_period,
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                "budgets": [{"nodes": "0", "reasons": list(DISRUPTION_REASONS_BLOCKED)}],
            },
            "limits": limits,
        },
    }


EFA_HUGEPAGES_2MI = "10256Mi"
"""Huge pages an EFA host has: "instances with the EFA driver installed pre-allocate 5128 2MiB Huge Pages" (EKS User
Guide, "Run machine learning training on Amazon EKS with Elastic Fabric Adapter"); the EKS AL2023 accelerated AMIs
carry the EFA driver."""


def hugepages_overlay(pool: Pool) -> dict[str, Any]:
    """A NodeOverlay that tells Karpenter's scheduling simulation the pool's nodes have those huge pages.

    Karpenter computes a node's capacity from the instance type (CPU, memory, pods, GPUs, Neuron, EFA: its
    instancetype `computeCapacity`) and knows nothing of huge pages, so a job pod that requests `hugepages-2Mi` (as
    every EFA job here does) fits no instance type and Karpenter never launches a node for it. A NodeOverlay
    (karpenter.sh/v1alpha1, feature gate `nodeOverlay`) adds the capacity (Karpenter docs, NodeOverlays)."""
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": f"{pool.name}-hugepages"},
        "spec": {
            "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool.name]}],
            "capacity": {"hugepages-2Mi": EFA_HUGEPAGES_2MI},
        },
    }


def pool_manifests(pool: Pool, refs: NodeClassRefs) -> list[dict[str, Any]]:
    """The EC2NodeClass, the NodePool that uses it, and for an EFA pool its huge-pages NodeOverlay."""
    docs = [node_class(pool, refs), node_pool(pool)]
    if pool.efa:
        docs.append(hugepages_overlay(pool))
    return docs
