"""The device-plugin Helm charts `TrainingCluster` installs for its accelerated nodes (versions in `versions.py`):
NVIDIA's with the first GPU node group or pool, Neuron's with the first Trainium/Inferentia one, the EFA plugin with
the first EFA one. Each tolerates every accelerator taint (`ACCELERATOR_TAINTS`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from aws_cdk import Lazy

from mlstack.catalog import InstanceType
from mlstack.constructs.training import versions
from mlstack.constructs.training.cluster_parts import Produce, on_label, tolerate
from mlstack.k8s.kube import EFA_TAINT, GPU_TAINT, LABEL_PREFIX, NEURON_TAINT

ACCELERATOR_TAINTS = (GPU_TAINT, NEURON_TAINT, EFA_TAINT)
"""Every taint an accelerated node group may carry: the device plugins tolerate all of them."""


def device_plugins(
    instance: InstanceType, *, efa: bool, installed: Collection[str], efa_instance_types: Callable[[], list[str]]
) -> list[tuple[versions.Chart, dict[str, Any]]]:
    """The charts (and values) that nodes of `instance` need and whose release is not `installed` yet, in install
    order; `efa_instance_types` gives the EFA plugin's allow-list at synth (every group added by then)."""
    kind = instance.accelerator.kind if instance.accelerator is not None else None
    charts: list[tuple[versions.Chart, dict[str, Any]]] = []
    if kind == "gpu" and versions.NVIDIA_DEVICE_PLUGIN.release not in installed:
        charts.append(
            (
                versions.NVIDIA_DEVICE_PLUGIN,
                {
                    "tolerations": tolerate(*ACCELERATOR_TAINTS),
                    # The chart's default affinity needs node-feature-discovery labels; select on ours instead.
                    "affinity": on_label(f"{LABEL_PREFIX}/accelerator-kind", ["gpu"]),
                },
            )
        )
    if kind in ("trainium", "inferentia") and versions.NEURON_HELM_CHART.release not in installed:
        # The device plugin only: the chart's scheduler extension stays off (its default; a job would also have to
        # name that scheduler), and so does its node problem detector (EKS node monitoring covers it). Values keys
        # per the chart README: check them when bumping the version.
        charts.append(
            (
                versions.NEURON_HELM_CHART,
                {"npd": {"enabled": False}, "devicePlugin": {"tolerations": tolerate(*ACCELERATOR_TAINTS)}},
            )
        )
    if efa and versions.EFA_DEVICE_PLUGIN.release not in installed:
        charts.append(
            (
                versions.EFA_DEVICE_PLUGIN,
                {
                    "tolerations": tolerate(*ACCELERATOR_TAINTS),
                    # The chart's node affinity is an allow-list of instance types; a type missing from the pinned
                    # chart's list never gets the plugin. List exactly the EFA groups' types (at synth, so every
                    # group added counts).
                    "supportedInstanceLabels": {
                        "keys": ["node.kubernetes.io/instance-type"],
                        "values": Lazy.any(Produce(efa_instance_types)),
                    },
                },
            )
        )
    return charts
