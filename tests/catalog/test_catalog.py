"""The instance catalog against ground truth: moto's DescribeInstanceTypes capture and botocore's SageMaker enums."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import botocore.session
import moto
import pytest

from mlstack.catalog import Accelerator, InstanceType, all_instances, get_instance
from mlstack.catalog.instances import catalog, load_catalog, network_string_gbps
from mlstack.errors import CatalogError, MlstackError

# The accelerated and CPU types the blueprints and the advisor rely on: the catalog must cover at least these.
REQUIRED = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.4xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "g5.xlarge",
    "g5.2xlarge",
    "g5.4xlarge",
    "g5.8xlarge",
    "g5.12xlarge",
    "g5.16xlarge",
    "g5.24xlarge",
    "g5.48xlarge",
    "g6.xlarge",
    "g6.2xlarge",
    "g6.4xlarge",
    "g6.8xlarge",
    "g6.12xlarge",
    "g6.16xlarge",
    "g6.24xlarge",
    "g6.48xlarge",
    "g6e.xlarge",
    "g6e.2xlarge",
    "g6e.4xlarge",
    "g6e.8xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.48xlarge",
    "trn1.2xlarge",
    "trn1.32xlarge",
    "trn1n.32xlarge",
    "trn2.3xlarge",
    "trn2.48xlarge",
    "inf1.xlarge",
    "inf1.2xlarge",
    "inf1.6xlarge",
    "inf1.24xlarge",
    "inf2.xlarge",
    "inf2.8xlarge",
    "inf2.24xlarge",
    "inf2.48xlarge",
    "c7i.xlarge",
    "c7i.8xlarge",
    "c7i.24xlarge",
    "c7i.48xlarge",
    "m7i.large",
    "m7i.xlarge",
    "m7i.8xlarge",
    "m7i.24xlarge",
    "m7i.48xlarge",
    "c6i.xlarge",
    "c6i.8xlarge",
    "c6i.32xlarge",
    "c7g.xlarge",
    "c7g.8xlarge",
    "c7g.16xlarge",
    "c8g.xlarge",
    "c8g.8xlarge",
    "c8g.24xlarge",
    "c8g.48xlarge",
]

# Every place where the catalog knowingly disagrees with the moto capture: (instance, field) -> reason.
# The cross-check fails on any disagreement not listed here, and on any entry here that no longer disagrees.
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("trn2.3xlarge", "accelerator.memory_gib"): (
        "API capture says 512 GiB per Trainium2 device; the Neuron trn2 architecture page gives 96 GiB per chip "
        "[NEURON-TRN2]"
    ),
    ("trn2.48xlarge", "accelerator.memory_gib"): (
        "API capture says 512 GiB per Trainium2 device (8 TiB total); Neuron docs: 1,536 GiB device memory over "
        "16 chips = 96 GiB per chip [NEURON-TRN2]"
    ),
}


@functools.cache
def moto_types() -> dict[str, Any]:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def facts_from_moto(raw: dict[str, Any]) -> dict[str, object]:
    """The comparable facts of one DescribeInstanceTypes record, keyed like the catalog fields."""
    net = raw["NetworkInfo"]
    facts: dict[str, object] = {
        "vcpus": raw["VCpuInfo"]["DefaultVCpus"],
        "memory_gib": raw["MemoryInfo"]["SizeInMiB"] / 1024,
        "network_performance": net["NetworkPerformance"],
        "efa_supported": bool(net.get("EfaSupported", False)),
        "max_network_cards": net["MaximumNetworkCards"],
        "max_efa_interfaces": net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        "efa_card_indexes": tuple(c["NetworkCardIndex"] for c in net["NetworkCards"] if "efa" in c["InterfaceTypes"]),
        "arch": raw["ProcessorInfo"]["SupportedArchitectures"][0],
    }
    storage = raw.get("InstanceStorageInfo")
    disks = storage["Disks"] if storage else []
    assert len(disks) <= 1, "one disk group per type is all the catalog models"
    facts["local_nvme_count"] = disks[0]["Count"] if disks else 0
    facts["local_nvme_gb"] = disks[0]["SizeInGB"] if disks else 0
    devices: list[dict[str, Any]] = []
    vendor = None
    if "GpuInfo" in raw:
        devices, vendor = raw["GpuInfo"]["Gpus"], "nvidia"
    elif "NeuronInfo" in raw:
        devices, vendor = raw["NeuronInfo"]["NeuronDevices"], "aws"
    assert len(devices) <= 1
    if devices:
        dev = devices[0]
        facts["accelerator.vendor"] = vendor
        facts["accelerator.model"] = dev["Name"]
        facts["accelerator.count"] = dev["Count"]
        facts["accelerator.memory_gib"] = round(dev["MemoryInfo"]["SizeInMiB"] / 1024, 2)
        if "CoreInfo" in dev:
            facts["accelerator.neuron_cores_per_device"] = dev["CoreInfo"]["Count"]
    else:
        facts["accelerator"] = None
    return facts


def facts_from_catalog(it: InstanceType) -> dict[str, object]:
    facts: dict[str, object] = {
        "vcpus": it.vcpus,
        "memory_gib": it.memory_gib,
        "network_performance": it.network_performance,
        "efa_supported": it.efa_supported,
        "max_network_cards": it.max_network_cards,
        "max_efa_interfaces": it.max_efa_interfaces,
        "efa_card_indexes": it.efa_card_indexes,
        "arch": it.arch,
        "local_nvme_count": it.local_nvme_count,
        "local_nvme_gb": it.local_nvme_gb,
    }
    acc = it.accelerator
    if acc is None:
        facts["accelerator"] = None
    else:
        facts["accelerator.vendor"] = acc.vendor
        facts["accelerator.model"] = acc.model
        facts["accelerator.count"] = acc.count
        facts["accelerator.memory_gib"] = acc.memory_gib
        if acc.neuron_cores_per_device is not None:
            facts["accelerator.neuron_cores_per_device"] = acc.neuron_cores_per_device
    return facts


def disagreements() -> dict[tuple[str, str], tuple[object, object]]:
    found: dict[tuple[str, str], tuple[object, object]] = {}
    types = moto_types()
    for it in all_instances():
        ours, theirs = facts_from_catalog(it), facts_from_moto(types[it.name])
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key, "<missing>") != theirs.get(key, "<missing>"):
                found[(it.name, key)] = (ours.get(key, "<missing>"), theirs.get(key, "<missing>"))
    return found


def test_catalog_covers_the_required_instances() -> None:
    names = {it.name for it in all_instances()}
    assert sorted(set(REQUIRED) - names) == []


def test_every_catalog_type_exists_in_the_ec2_capture() -> None:
    missing = [it.name for it in all_instances() if it.name not in moto_types()]
    assert missing == []


def test_catalog_matches_describe_instance_types_except_listed_disagreements() -> None:
    found = disagreements()
    unlisted = {k: v for k, v in found.items() if k not in KNOWN_DISAGREEMENTS}
    assert unlisted == {}, f"catalog vs moto (ours, moto): {unlisted}"
    stale = sorted(set(KNOWN_DISAGREEMENTS) - set(found))
    assert stale == [], f"allow-list entries that no longer disagree (remove them): {stale}"


def test_every_allow_listed_disagreement_is_explained_in_the_data_file() -> None:
    for name, _field in KNOWN_DISAGREEMENTS:
        note = get_instance(name).note or ""
        assert "NEURON-TRN2" in note and "96 GiB" in note and "512 GiB" in note


def test_trainium2_memory_is_96_gib_per_chip() -> None:
    acc = get_instance("trn2.48xlarge").accelerator
    assert acc is not None
    assert (acc.count, acc.memory_gib, acc.total_memory_gib) == (16, 96.0, 1536.0)


def test_sagemaker_flags_match_botocore_enums() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    enums = {
        "sagemaker_hosting": set(model.shape_for("ProductionVariantInstanceType").enum),
        "sagemaker_training": set(model.shape_for("TrainingInstanceType").enum),
        "sagemaker_hyperpod": set(model.shape_for("ClusterInstanceType").enum),
    }
    wrong = [
        (it.name, field)
        for it in all_instances()
        for field, enum in enums.items()
        if getattr(it, field) != (it.sagemaker_name in enum)
    ]
    assert wrong == []


def test_network_gbps_is_the_number_in_the_api_string() -> None:
    assert network_string_gbps("Up to 10 Gigabit") == 10.0
    assert network_string_gbps("4x 100 Gigabit") == 400.0
    assert network_string_gbps("16x 200 Gigabit") == 3200.0
    assert network_string_gbps("37.5 Gigabit") == 37.5
    for it in all_instances():
        assert it.network_gbps == network_string_gbps(it.network_performance)
    with pytest.raises(ValueError, match="unrecognised"):
        network_string_gbps("Very High")


def test_lookup_by_ec2_and_sagemaker_name() -> None:
    it = get_instance("p5.48xlarge")
    assert get_instance("ml.p5.48xlarge") is it
    assert get_instance("  ML.P5.48XLARGE ") is it
    assert it.name == "p5.48xlarge"
    assert it.family == "p5"
    assert it.sagemaker_name == "ml.p5.48xlarge"
    assert it.accelerator == Accelerator(vendor="nvidia", kind="gpu", model="H100", count=8, memory_gib=80.0)
    assert (it.vcpus, it.memory_gib, it.network_gbps) == (192, 2048.0, 3200.0)
    assert (it.efa_supported, it.max_network_cards, it.max_efa_interfaces) == (True, 32, 32)
    assert (it.local_nvme_count, it.local_nvme_gb, it.has_local_nvme) == (8, 3800, True)
    assert it.gpudirect_rdma is True
    assert it.total_accelerator_memory_gib == 640.0
    assert (it.sagemaker_hosting, it.sagemaker_training, it.sagemaker_hyperpod) == (True, True, True)
    assert it.arch == "x86_64" and not it.intel_amx and not it.graviton


def test_unknown_instance_lists_close_matches() -> None:
    with pytest.raises(CatalogError) as info:
        get_instance("p5.24xlarge")
    message = str(info.value)
    assert "'p5.24xlarge'" in message and "p5.48xlarge" in message and "p5.4xlarge" in message
    assert isinstance(info.value, MlstackError)
    with pytest.raises(CatalogError, match=r"known families: .*p5"):
        get_instance("zz9.huge")


def test_p6_b300_card_zero_is_ena_only() -> None:
    it = get_instance("p6-b300.48xlarge")
    assert it.max_network_cards == 17
    assert it.efa_card_indexes == tuple(range(1, 17))
    assert it.max_efa_interfaces == 16


def test_cpu_flags() -> None:
    assert get_instance("c7i.48xlarge").intel_amx and get_instance("m7i.large").intel_amx
    assert not get_instance("c6i.32xlarge").intel_amx
    for name in ("c7g.16xlarge", "c8g.48xlarge"):
        it = get_instance(name)
        assert it.graviton and it.arch == "arm64" and it.accelerator is None
        assert it.total_accelerator_memory_gib == 0.0


def test_gpudirect_rdma_only_on_p_series() -> None:
    for it in all_instances():
        if it.family.startswith("g") or it.accelerator is None:
            assert it.gpudirect_rdma is False, it.name
    assert get_instance("p5.4xlarge").gpudirect_rdma is None  # unconfirmed: no primary source covers the single-EFA P5


def test_prices_are_sourced_or_explained() -> None:
    cat = catalog()
    for it in all_instances():
        if it.price_per_hour is None:
            assert (it.price_note and "unknown" in it.price_note.lower()) or "no on-demand" in (it.note or "")
        else:
            assert it.price_source in cat.sources
            assert it.price_note
        if it.family.startswith("p") and it.price_per_hour is not None:
            assert it.price_note is not None and "June-2025" in it.price_note
    assert get_instance("p5.48xlarge").price_per_hour == 98.32
    assert get_instance("p5e.48xlarge").price_per_hour is None


def test_catalog_file_is_versioned_and_hand_dated() -> None:
    cat = catalog()
    assert cat.version >= 1
    assert cat.generated <= cat.reviewed
    assert catalog() is cat  # loaded once


def test_objects_are_frozen() -> None:
    it = get_instance("p5.48xlarge")
    with pytest.raises(ValueError, match="frozen"):
        it.vcpus = 1
    assert it.accelerator is not None
    with pytest.raises(ValueError, match="frozen"):
        it.accelerator.count = 1


def test_to_json_has_derived_fields() -> None:
    data = get_instance("trn1.32xlarge").to_json()
    assert data["family"] == "trn1" and data["total_accelerator_memory_gib"] == 512.0
    json.dumps(data)


INVALID_ENTRY = """
version: 1
generated: "2026-11-30"
reviewed: "2026-11-30"
sources: {MOTO: x}
price_notes: {}
accelerator_models: {}
instances:
  x1.large:
    accelerator: null
    vcpus: 2
    memory_gib: 4.0
    network_performance: "Up to 10 Gigabit"
    network_gbps: 25.0
    efa_supported: true
    max_network_cards: 1
    max_efa_interfaces: 0
    local_nvme_count: 1
    local_nvme_gb: 0
    gpudirect_rdma: false
    intel_amx: false
    graviton: true
    arch: x86_64
    sagemaker_hosting: false
    sagemaker_training: false
    sagemaker_hyperpod: false
    price_per_hour: null
    price_date: null
    price_source: none
    sources: [NOPE]
"""


def test_loader_rejects_inconsistent_entries() -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(INVALID_ENTRY)
    message = str(info.value)
    for fragment in ("network_gbps", "max_efa_interfaces", "local_nvme", "graviton", "price_note"):
        assert fragment in message
    assert "\n" not in message


def test_loader_rejects_unknown_fields_and_bad_yaml() -> None:
    with pytest.raises(CatalogError, match="invalid"):
        load_catalog(INVALID_ENTRY.replace("    vcpus: 2", "    vcpus: 2\n    cores: 1"))
    with pytest.raises(CatalogError, match="invalid"):
        load_catalog("version: [1")
