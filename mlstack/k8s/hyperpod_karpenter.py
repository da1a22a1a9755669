"""The manifests of HyperPod's managed Karpenter (engine hyperpod-eks, capacity_manager karpenter): per instance
group a `HyperpodNodeClass` (karpenter.sagemaker.amazonaws.com/v1) naming it and a Karpenter `NodePool`
(karpenter.sh/v1) on that class, whose limit is the group's max_size in accelerators.

HyperPod installs and runs the Karpenter controller and the HyperpodNodeClass CRD itself; no schema of that CRD is
public, so the fields here are the documented ones (SageMaker HyperPod docs, "Create a NodeClass": `spec.
instanceGroups`, at most 10; "Create a NodePool": `nodeClassRef {group, kind, name}`, requirements limited to
`node.kubernetes.io/instance-type`, `topology.kubernetes.io/zone` and `kubernetes.io/arch` amd64) and the NodePool
validates against Karpenter's own v1 CRD (tests/k8s). The pool never interrupts a job, like the eks engine's pools
(`mlstack.k8s.karpenter`): consolidation only when empty, no expiry, no disruption for drift or under-use.
"""

from __future__ import annotations

from typing import Any

from mlstack.config.training import TrainingConfig
from mlstack.design.hyperpod_governance import Autoscaling
from mlstack.design.karpenter import DISRUPTION_REASONS_BLOCKED
from mlstack.k8s.kube import LABEL_PREFIX, accelerator_resource

NODE_CLASS_API = "karpenter.sagemaker.amazonaws.com/v1"
NODE_CLASS_KIND = "HyperpodNodeClass"
NODE_CLASS_CRD = "hyperpodnodeclasses.karpenter.sagemaker.amazonaws.com"
"""The CRD's name: Kubernetes names a CRD `<plural>.<group>`, and the plural of the kind is the lowercase
`hyperpodnodeclasses` (the docs show the kind and group; the plural is the Kubernetes convention)."""


def node_class_name(design: Autoscaling, group: str) -> str:
    return f"{design.node_class}-{group}"


def hyperpod_pool_manifests(training: TrainingConfig, design: Autoscaling) -> list[dict[str, Any]]:
    """A HyperpodNodeClass and a NodePool per instance group."""
    groups = {g.name: g for g in training.node_groups}
    docs: list[dict[str, Any]] = []
    for name, ml_type, max_nodes in design.max_nodes:
        group = groups[name]
        it = group.instance
        resource = accelerator_resource(it)
        limits = {resource: str(max_nodes * it.accelerator.count)} if resource and it.accelerator else {}
        node_class = node_class_name(design, name)
        docs.append(
            {
                "apiVersion": NODE_CLASS_API,
                "kind": NODE_CLASS_KIND,
                "metadata": {"name": node_class},
                "spec": {"instanceGroups": [name]},
            }
        )
        docs.append(
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": node_class},
                "spec": {
                    "template": {
                        # The label the rendered job selects (HyperPod sets it on the group's nodes through the
                        # instance group's KubernetesConfig): Karpenter launches a node for a pending pod only if the
                        # pool's nodes carry every label the pod selects.
                        "metadata": {"labels": {f"{LABEL_PREFIX}/node-group": name}},
                        "spec": {
                            "nodeClassRef": {
                                "group": NODE_CLASS_API.split("/", 1)[0],
                                "kind": NODE_CLASS_KIND,
                                "name": node_class,
                            },
                            "expireAfter": "Never",
                            "terminationGracePeriod": f"{design.termination_grace_period_minutes}m",
                            "requirements": [
                                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [ml_type]},
                                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            ],
                        },
                    },
                    "disruption": {
                        "consolidationPolicy": "WhenEmpty",
                        "consolidateAfter": f"{design.consolidate_after_minutes}m",
                        "budgets": [{"nodes": "0", "reasons": list(DISRUPTION_REASONS_BLOCKED)}],
                    },
                    # Karpenter's hard cap: max_size nodes' worth of accelerators, the plan's maximum.
                    "limits": limits,
                },
            }
        )
    return docs
