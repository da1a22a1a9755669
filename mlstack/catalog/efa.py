"""EFA network-interface layout for launch templates: one EFA per EFA-capable network card.

The one place in mlstack that decides the layout (DESIGN.md, "Decisions already taken"; domain.md §2.2):

- card 0, device 0 = `efa` (EFA with ENA: the primary interface, carries the node's one IP address);
- cards 1..N-1, device 1 = `efa-only` (no IP address consumed: a p5.48xlarge uses 1 IP instead of 32);
- `efa_on_every_card=True` puts `efa` (EFA with ENA, one IP each) on every card instead;
- families whose card 0 takes no EFA (p6-b300) keep card 0 device 0 as a plain ENA `interface` and put one EFA on
  each other card, so the count still equals the instance's `MaximumEfaInterfaces`;
- single-card types get one `efa` on card 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlstack.catalog.instances import InstanceType, all_instances, get_instance
from mlstack.errors import CatalogError

__all__ = ["EfaInterface", "InterfaceType", "efa_alternatives", "efa_interface_count", "efa_layout"]

InterfaceType = Literal["interface", "efa", "efa-only"]


class EfaInterface(BaseModel):
    """One `NetworkInterfaces[]` entry of a launch template (subnet and security groups are the caller's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    network_card_index: int = Field(ge=0)
    device_index: int = Field(ge=0)
    interface_type: InterfaceType

    @property
    def is_efa(self) -> bool:
        return self.interface_type != "interface"


def efa_alternatives(it: InstanceType, *, limit: int = 8) -> list[str]:
    """EFA-capable catalog types to suggest instead of `it`: same family first, then same accelerator model,
    then same accelerator kind (or CPU-only for CPU hosts)."""
    capable = [c for c in all_instances() if c.efa_supported and c.name != it.name]

    def kind(x: InstanceType) -> str:
        return x.accelerator.kind if x.accelerator else "cpu"

    def model(x: InstanceType) -> str | None:
        return x.accelerator.model if x.accelerator else None

    tiers = (
        [c for c in capable if c.family == it.family],
        [c for c in capable if c.family != it.family and model(c) is not None and model(c) == model(it)],
        [c for c in capable if c.family != it.family and model(c) != model(it) and kind(c) == kind(it)],
    )
    names: list[str] = []
    for tier in tiers:
        names.extend(c.name for c in tier if c.name not in names)
    return names[:limit]


def efa_layout(instance_type: str, *, efa_on_every_card: bool = False) -> tuple[EfaInterface, ...]:
    """Launch-template interfaces that use every EFA `instance_type` has, ordered by network card.

    Raises `CatalogError` for an unknown type, or for a type without EFA (naming EFA-capable alternatives).
    """
    it = get_instance(instance_type)
    if not it.efa_supported:
        alternatives = efa_alternatives(it)
        return_hint = ", ".join(alternatives) if alternatives else "none in the catalog"
        raise CatalogError(f"{it.name} does not support EFA; EFA-capable alternatives: {return_hint}")
    interfaces: list[EfaInterface] = []
    if 0 not in it.efa_card_indexes:
        # Card 0 accepts only an ENA interface (p6-b300): it stays the primary, IP-carrying interface.
        interfaces.append(EfaInterface(network_card_index=0, device_index=0, interface_type="interface"))
    for card in it.efa_card_indexes:
        if card == 0:
            interfaces.append(EfaInterface(network_card_index=0, device_index=0, interface_type="efa"))
        else:
            interfaces.append(
                EfaInterface(
                    network_card_index=card,
                    device_index=1,
                    interface_type="efa" if efa_on_every_card else "efa-only",
                )
            )
    return tuple(interfaces)


def efa_interface_count(instance_type: str) -> int:
    """How many EFA devices an instance of `instance_type` gets from `efa_layout` (0 without EFA support).

    The one count every training engine uses: EKS and Batch launch templates carry this many EFA interfaces,
    a Batch job definition maps this many `/dev/infiniband/uverbsN` devices, HyperPod reports it in the plan.
    """
    if not get_instance(instance_type).efa_supported:
        return 0
    return sum(1 for nic in efa_layout(instance_type) if nic.is_efa)
