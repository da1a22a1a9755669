"""Karpenter node pools of a blueprint (`training.capacity_manager: karpenter`): one NodePool and EC2NodeClass per
node group, from the same catalog and EFA layout as the managed node groups. No CDK import: the stack, the manifest
renderers (`mlstack.k8s.karpenter`) and `mlstack plan` read the same `Pool`.

Training pools never interrupt a job (Karpenter docs v1.14, "Disruption"): consolidation only of empty nodes
(`WhenEmpty`) after `consolidate_after_minutes` (>= 10), no expiry (`expireAfter: Never`), a budget of zero nodes for
the Drifted and Underutilized reasons, `karpenter.sh/do-not-disrupt` on the job's pods, and a termination grace
period at least the checkpoint interval. `limits` are the group's max_size x accelerators: a hard cost cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.catalog import EfaInterface, InstanceType, efa_layout, get_instance
from mlstack.catalog.prices import price as ec2_price
from mlstack.config.training import NodeGroupConfig, TrainingConfig
from mlstack.config.training_elastic import KarpenterConfig
from mlstack.config.training_elastic_rules import group_capacity_types, pool_zones
from mlstack.k8s.kube import EFA_TAINT, LABEL_PREFIX, accelerator_resource, accelerator_taint_key

AMI_ALIAS = "al2023@latest"
"""EC2NodeClass `amiSelectorTerms` alias: the EKS-optimized AL2023 AMI of the cluster's Kubernetes version, its
NVIDIA or Neuron variant chosen per instance type (Karpenter docs, EC2NodeClasses: amiSelectorTerms alias). A new
AMI release marks nodes Drifted; the pools' Drifted budget of 0 keeps running nodes, new nodes get the new AMI."""
DISRUPTION_REASONS_BLOCKED = ("Drifted", "Underutilized")


@dataclass(frozen=True)
class Pool:
    """One Karpenter NodePool + EC2NodeClass (named after the node group)."""

    name: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    capacity_types: tuple[str, ...]
    efa: bool
    interfaces: tuple[EfaInterface, ...] | None
    """EC2NodeClass `networkInterfaces`; None leaves them to Karpenter (one `efa` per card for an EFA pod)."""
    accelerator_resource: str | None
    accelerators_per_node: int
    max_nodes: int
    taints: tuple[str, ...]
    labels: dict[str, str]
    reservation_id: str | None
    capacity_kind: str
    """The node group's capacity.type (on_demand, spot, capacity_reservation, capacity_block)."""
    placement_group: bool
    consolidate_after: str
    termination_grace_period: str
    root_volume_gib: int

    @property
    def limit(self) -> int:
        """NodePool `limits` in accelerators (max nodes x accelerators per node)."""
        return self.max_nodes * self.accelerators_per_node

    @property
    def instance(self) -> InstanceType:
        return get_instance(self.instance_types[0])

    def node_per_hour(self) -> float | None:
        """$/h of one node at the catalog's on-demand price (an ODCR bills the same); None for Spot (market price),
        a Capacity Block (prepaid per block) or an unpriced type."""
        if "spot" in self.capacity_types or self.capacity_kind == "capacity_block":
            return None
        dated = ec2_price(self.instance_types[0])
        return None if dated is None else dated.usd_per_hour

    def max_per_hour(self) -> float | None:
        """$/h at the limit: max_nodes running (the pool's hard cap; the minimum is 0, it starts empty)."""
        node = self.node_per_hour()
        return None if node is None else node * self.max_nodes


def karpenter_interfaces(instance_type: str, *, efa_on_every_card: bool) -> tuple[EfaInterface, ...] | None:
    """The catalog's EFA layout as the EC2NodeClass of Karpenter v1.14 can express it.

    Its `networkInterfaces[].interfaceType` takes only `interface` or `efa-only`, and the primary (card 0, device 0)
    must be `interface` (the CRD's validation rules). So card 0 keeps its EFA as an `efa-only` device 1 next to the
    ENA primary (the current EC2 guide's layout, "Maximize network bandwidth on accelerated instances with EFA"),
    and the other cards keep the catalog's `efa-only`: the same EFA count and one IP per node. `efa` on every card
    (an IP each) is Karpenter's own layout when the pod requests EFA and the class lists no interfaces: None.
    """
    if efa_on_every_card:
        return None
    out: list[EfaInterface] = []
    for nic in efa_layout(instance_type):
        if nic.network_card_index == 0 and nic.interface_type == "efa":
            out.append(EfaInterface(network_card_index=0, device_index=0, interface_type="interface"))
            out.append(EfaInterface(network_card_index=0, device_index=1, interface_type="efa-only"))
        else:
            out.append(nic)
    return tuple(out)


def pool_labels(group: NodeGroupConfig, it: InstanceType) -> dict[str, str]:
    """The labels the node groups carry that jobs and device plugins select on."""
    labels = {
        f"{LABEL_PREFIX}/node-group": group.name,
        f"{LABEL_PREFIX}/capacity": group.capacity.type.replace("_", "-"),
        f"{LABEL_PREFIX}/efa-interfaces": str(sum(n.is_efa for n in efa_layout(it.name)) if group.efa else 0),
    }
    if it.accelerator is not None:
        labels[f"{LABEL_PREFIX}/accelerator-kind"] = it.accelerator.kind
        labels[f"{LABEL_PREFIX}/accelerator"] = it.accelerator.model
        labels[f"{LABEL_PREFIX}/accelerator-count"] = str(it.accelerator.count)
    return labels


def pools(training: TrainingConfig, zones: list[str]) -> list[Pool]:
    """One pool per node group, in blueprint order (empty unless capacity_manager is karpenter)."""
    if training.capacity_manager != "karpenter":
        return []
    settings = training.karpenter or KarpenterConfig()
    overrides = {p.node_group: p for p in settings.pools}
    out: list[Pool] = []
    for group in training.node_groups:
        it = group.instance
        override = overrides.get(group.name)
        extra = tuple(override.extra_instance_types) if override else ()
        kinds = override.capacity_types if override and override.capacity_types else group_capacity_types(group)
        taints = tuple(k for k in (accelerator_taint_key(it), EFA_TAINT if group.efa else None) if k)
        out.append(
            Pool(
                name=group.name,
                instance_types=(it.name, *(t for t in extra if t != it.name)),
                zones=tuple(pool_zones(training, group, zones)),
                capacity_types=tuple(kinds),
                efa=group.efa,
                interfaces=karpenter_interfaces(it.name, efa_on_every_card=group.efa_on_every_card)
                if group.efa
                else None,
                accelerator_resource=accelerator_resource(it),
                accelerators_per_node=it.accelerator.count if it.accelerator else 0,
                max_nodes=group.max_size,
                taints=taints,
                labels=pool_labels(group, it),
                reservation_id=group.capacity.reservation_id,
                capacity_kind=group.capacity.type,
                placement_group=group.uses_placement_group,
                consolidate_after=f"{settings.consolidate_after_minutes}m",
                termination_grace_period=f"{settings.termination_grace_period_minutes}m",
                root_volume_gib=group.root_volume_gib,
            )
        )
    return out
