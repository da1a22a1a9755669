"""EFA launch-template layout for every EFA family: one EFA per EFA-capable card, one IP per node."""

from __future__ import annotations

import pytest

from mlstack.catalog import EfaInterface, all_instances, efa_layout, get_instance
from mlstack.catalog.efa import efa_alternatives
from mlstack.errors import CatalogError

# MaximumEfaInterfaces of EC2 DescribeInstanceTypes (moto 5.2.5 capture).
EXPECTED_EFAS = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "p6-b300.48xlarge": 16,
    "trn1.32xlarge": 8,
    "trn1n.32xlarge": 16,
    "trn2.48xlarge": 16,
    "g6e.24xlarge": 2,
    "g6e.48xlarge": 4,
}
SINGLE_CARD_EFA = [
    "p5.4xlarge",
    "trn2.3xlarge",
    "g5.8xlarge",
    "g6.48xlarge",
    "g6e.8xlarge",
    "inf1.24xlarge",
    "c6i.32xlarge",
    "c7i.48xlarge",
    "m7i.48xlarge",
    "c7g.16xlarge",
    "c8g.24xlarge",
]


def efas(layout: tuple[EfaInterface, ...]) -> list[EfaInterface]:
    return [i for i in layout if i.is_efa]


@pytest.mark.parametrize(("name", "count"), sorted(EXPECTED_EFAS.items()))
def test_default_layout_uses_every_efa(name: str, count: int) -> None:
    layout = efa_layout(name)
    assert len(efas(layout)) == count == get_instance(name).max_efa_interfaces
    cards = [i.network_card_index for i in layout]
    assert cards == sorted(cards) and len(set(cards)) == len(cards)  # one interface per card


@pytest.mark.parametrize("name", ["p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "trn1.32xlarge", "trn2.48xlarge"])
def test_default_layout_primary_efa_then_efa_only(name: str) -> None:
    layout = efa_layout(name)
    assert layout[0] == EfaInterface(network_card_index=0, device_index=0, interface_type="efa")
    n = get_instance(name).max_network_cards
    assert list(layout[1:]) == [
        EfaInterface(network_card_index=card, device_index=1, interface_type="efa-only") for card in range(1, n)
    ]


def test_p5_layout_uses_one_ip() -> None:
    layout = efa_layout("ml.p5.48xlarge")
    assert len(layout) == 32
    assert sum(1 for i in layout if i.interface_type in ("efa", "interface")) == 1


def test_efa_on_every_card() -> None:
    layout = efa_layout("p5.48xlarge", efa_on_every_card=True)
    assert len(layout) == 32
    assert all(i.interface_type == "efa" for i in layout)
    assert layout[0].device_index == 0 and all(i.device_index == 1 for i in layout[1:])


def test_p6_b300_keeps_card_zero_as_ena() -> None:
    layout = efa_layout("p6-b300.48xlarge")
    assert layout[0] == EfaInterface(network_card_index=0, device_index=0, interface_type="interface")
    assert len(layout) == 17
    assert [i.network_card_index for i in layout[1:]] == list(range(1, 17))
    assert all(i.interface_type == "efa-only" and i.device_index == 1 for i in layout[1:])
    every = efa_layout("p6-b300.48xlarge", efa_on_every_card=True)
    assert every[0].interface_type == "interface"
    assert [i.interface_type for i in every[1:]] == ["efa"] * 16


@pytest.mark.parametrize("name", SINGLE_CARD_EFA)
def test_single_card_types_get_one_efa(name: str) -> None:
    assert efa_layout(name) == (EfaInterface(network_card_index=0, device_index=0, interface_type="efa"),)
    assert efa_layout(name, efa_on_every_card=True) == efa_layout(name)


def test_every_efa_type_in_catalog_gets_max_efa_interfaces() -> None:
    for it in all_instances():
        if it.efa_supported:
            layout = efa_layout(it.name)
            assert len(efas(layout)) == it.max_efa_interfaces, it.name
            assert layout[0].network_card_index == 0 and layout[0].device_index == 0


def test_no_efa_error_names_instance_and_alternatives() -> None:
    with pytest.raises(CatalogError) as info:
        efa_layout("g5.xlarge")
    message = str(info.value)
    assert message.startswith("g5.xlarge does not support EFA; EFA-capable alternatives: g5.8xlarge, g5.12xlarge")
    assert "\n" not in message


def test_alternatives_are_efa_capable_same_family_first() -> None:
    alts = efa_alternatives(get_instance("inf2.48xlarge"))
    assert alts and all(get_instance(a).efa_supported for a in alts)
    assert alts[0] == "inf1.24xlarge"  # same kind (inferentia) before others
    alts = efa_alternatives(get_instance("c7g.xlarge"))
    assert alts[0] == "c7g.16xlarge"
    assert all(get_instance(a).accelerator is None for a in alts)
    with pytest.raises(CatalogError, match=r"alternatives: trn1\.32xlarge, trn1n\.32xlarge, trn2\.3xlarge"):
        efa_layout("trn1.2xlarge")


def test_unknown_instance() -> None:
    with pytest.raises(CatalogError, match=r"unknown instance type 'p9\.48xlarge'"):
        efa_layout("p9.48xlarge")


def test_interface_is_frozen_and_strict() -> None:
    i = EfaInterface(network_card_index=0, device_index=0, interface_type="efa")
    with pytest.raises(ValueError, match="frozen"):
        i.device_index = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        EfaInterface(network_card_index=0, device_index=0, interface_type="ena")
