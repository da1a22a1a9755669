"""Instance catalog: typed, frozen facts about the EC2 / SageMaker instance types that matter for ML.

The facts live in `data/instances.yaml` (versioned, dated by hand, every number with its source). This module
validates that file once (cached) and answers lookups. Nothing here reads the clock, the environment or the
network.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mlstack import resources, yamlload
from mlstack.errors import CatalogError

__all__ = [
    "Accelerator",
    "AcceleratorModel",
    "Catalog",
    "InstanceType",
    "all_instances",
    "catalog",
    "get_instance",
    "normalize_name",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

# "Up to 10 Gigabit" -> 10, "4x 100 Gigabit" -> 400, "3200 Gigabit" -> 3200
_NETWORK_RE = re.compile(r"^(?:Up to )?(?:(?P<cards>\d+)x )?(?P<gbps>\d+(?:\.\d+)?) Gigabit$")


def network_string_gbps(network_performance: str) -> float:
    """The bandwidth in Gbps that an API `NetworkPerformance` string states ("Up to" -> the burst figure)."""
    match = _NETWORK_RE.match(network_performance)
    if match is None:
        raise ValueError(f"unrecognised NetworkPerformance string {network_performance!r}")
    return float(match["cards"] or 1) * float(match["gbps"])


class Accelerator(BaseModel):
    """The accelerators of one instance: `count` devices of one `model`, `memory_gib` each."""

    model_config = _FROZEN

    vendor: Literal["nvidia", "aws"]
    kind: Literal["gpu", "trainium", "inferentia"]
    model: str = Field(min_length=1)
    count: int = Field(gt=0)
    memory_gib: float = Field(gt=0)
    """Usable device memory per accelerator in GiB (the API figure, e.g. A10G 22.35, not the marketing 24 GB)."""
    neuron_cores_per_device: int | None = Field(default=None, gt=0)
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0)
    """Overrides the accelerator model's bandwidth for a memory variant (A100 40GB: 1,555 GB/s vs 80GB: 2,039)."""

    @property
    def total_memory_gib(self) -> float:
        return self.count * self.memory_gib

    def describe(self) -> str:
        """`8x H100 80GiB` (usable memory rounded to whole GiB)."""
        return f"{self.count}x {self.model} {self.memory_gib:.0f}GiB"


class AcceleratorModel(BaseModel):
    """Per-model compute and memory facts (the training time estimate and the serving estimate)."""

    model_config = _FROZEN

    peak_dense_bf16_tflops: float | None = Field(gt=0)
    peak_dense_fp8_tflops: float | None = Field(default=None, gt=0)
    """None: no FP8 tensor cores (FP8 weights then compute at the 16-bit rate)."""
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0)
    """Device memory bandwidth, GB/s (decimal), per device."""
    source: str = Field(min_length=1)


class InstanceType(BaseModel):
    """One instance type. Field provenance is documented at the top of `data/instances.yaml`."""

    model_config = _FROZEN

    name: str = Field(pattern=r"^[a-z0-9-]+\.[a-z0-9-]+$")
    accelerator: Accelerator | None
    vcpus: int = Field(gt=0)
    memory_gib: float = Field(gt=0)
    network_performance: str
    network_gbps: float = Field(gt=0)
    efa_supported: bool
    max_network_cards: int = Field(ge=1)
    max_efa_interfaces: int = Field(ge=0)
    efa_card_indexes: tuple[int, ...] = ()
    """Network cards that accept an EFA interface (filled from `max_network_cards` when the file omits it)."""
    local_nvme_count: int = Field(ge=0)
    local_nvme_gb: int = Field(ge=0)
    """Size of each local NVMe disk in GB (0 when EBS only)."""
    gpudirect_rdma: bool | None
    intel_amx: bool
    graviton: bool
    arch: Literal["x86_64", "arm64"]
    sagemaker_hosting: bool
    sagemaker_training: bool
    sagemaker_hyperpod: bool
    price_per_hour: float | None = Field(gt=0)
    price_date: str | None
    price_source: str = Field(min_length=1)
    price_note: str | None = None
    note: str | None = None
    sources: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _default_efa_cards(cls, data: Any) -> Any:
        if isinstance(data, dict) and "efa_card_indexes" not in data and data.get("efa_supported"):
            return {**data, "efa_card_indexes": tuple(range(int(data.get("max_network_cards", 1))))}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> InstanceType:
        problems: list[str] = []
        if self.network_gbps != network_string_gbps(self.network_performance):
            problems.append(f"network_gbps {self.network_gbps} disagrees with {self.network_performance!r}")
        if self.efa_supported != (self.max_efa_interfaces > 0):
            problems.append("efa_supported must be true exactly when max_efa_interfaces > 0")
        if len(self.efa_card_indexes) != self.max_efa_interfaces:
            problems.append(
                f"{len(self.efa_card_indexes)} EFA-capable cards but max_efa_interfaces {self.max_efa_interfaces}"
            )
        if any(not 0 <= i < self.max_network_cards for i in self.efa_card_indexes):
            problems.append(f"efa_card_indexes {self.efa_card_indexes} outside 0..{self.max_network_cards - 1}")
        if list(self.efa_card_indexes) != sorted(set(self.efa_card_indexes)):
            problems.append("efa_card_indexes must be sorted and unique")
        if (self.local_nvme_count == 0) != (self.local_nvme_gb == 0):
            problems.append("local_nvme_count and local_nvme_gb must both be 0 or both be positive")
        if self.graviton and self.arch != "arm64":
            problems.append("graviton instances are arm64")
        if self.intel_amx and self.arch != "x86_64":
            problems.append("intel_amx instances are x86_64")
        if self.price_per_hour is None and not self.price_note:
            problems.append("a null price needs a price_note saying why")
        if problems:
            raise ValueError(f"{self.name}: " + "; ".join(problems))
        return self

    @property
    def family(self) -> str:
        """`p5` for `p5.48xlarge`."""
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def sagemaker_name(self) -> str:
        return f"ml.{self.name}"

    @property
    def has_local_nvme(self) -> bool:
        return self.local_nvme_count > 0

    @property
    def total_accelerator_memory_gib(self) -> float:
        return self.accelerator.total_memory_gib if self.accelerator else 0.0

    @property
    def is_cpu_only(self) -> bool:
        return self.accelerator is None

    @property
    def efa_gbps(self) -> float:
        """Network bandwidth usable through EFA (the instance figure when it has EFA, else 0)."""
        return self.network_gbps if self.efa_supported else 0.0

    def to_json(self) -> dict[str, Any]:
        """Every field plus the derived properties, JSON-ready."""
        data = self.model_dump(mode="json")
        data.update(
            family=self.family,
            sagemaker_name=self.sagemaker_name,
            has_local_nvme=self.has_local_nvme,
            total_accelerator_memory_gib=self.total_accelerator_memory_gib,
        )
        return data


class Catalog(BaseModel):
    """The whole data file."""

    model_config = _FROZEN

    version: int = Field(ge=1)
    generated: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    reviewed: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    sources: dict[str, str]
    price_notes: dict[str, str]
    accelerator_models: dict[str, AcceleratorModel]
    instances: dict[str, InstanceType]

    @model_validator(mode="before")
    @classmethod
    def _name_instances(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("instances"), dict):
            named = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in data["instances"].items()}
            return {**data, "instances": named}
        return data

    @model_validator(mode="after")
    def _references(self) -> Catalog:
        problems: list[str] = []
        for it in self.instances.values():
            unknown = [s for s in it.sources if s not in self.sources]
            if unknown:
                problems.append(f"{it.name}: unknown source tags {unknown}")
            if it.price_per_hour is not None and it.price_source not in self.sources:
                problems.append(f"{it.name}: price_source {it.price_source!r} is not a source tag")
            if it.accelerator and it.accelerator.model not in self.accelerator_models:
                problems.append(f"{it.name}: accelerator model {it.accelerator.model} missing in accelerator_models")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def peak_tflops(self, it: InstanceType) -> float | None:
        """Peak dense 16-bit TFLOPS per accelerator of `it`, or None when unknown / CPU only."""
        if it.accelerator is None:
            return None
        return self.accelerator_models[it.accelerator.model].peak_dense_bf16_tflops

    def memory_bandwidth_gbps(self, it: InstanceType) -> float | None:
        """Device memory bandwidth per accelerator of `it` in GB/s (the instance's variant first), or None."""
        if it.accelerator is None:
            return None
        return (
            it.accelerator.memory_bandwidth_gbps or self.accelerator_models[it.accelerator.model].memory_bandwidth_gbps
        )

    def peak_fp8_tflops(self, it: InstanceType) -> float | None:
        """Peak dense FP8 TFLOPS per accelerator of `it`, or None without FP8 tensor cores / CPU only."""
        if it.accelerator is None:
            return None
        return self.accelerator_models[it.accelerator.model].peak_dense_fp8_tflops


DATA_FILE = "instances.yaml"


def load_catalog(text: str) -> Catalog:
    """Validate catalog YAML text (exposed for tests of the validation rules)."""
    try:
        raw = yamlload.safe_load(text)
        return Catalog.model_validate(raw)
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"instance catalog is invalid: {err}".replace("\n", " | ")) from err


@functools.cache
def catalog() -> Catalog:
    """The packaged catalog, validated once per process."""
    text = resources.catalog_text(DATA_FILE)
    return load_catalog(text)


def normalize_name(name: str) -> str:
    """`ML.P5.48XLARGE ` -> `p5.48xlarge` (SageMaker names resolve to the EC2 type)."""
    key = name.strip().lower()
    return key.removeprefix("ml.")


def get_instance(name: str) -> InstanceType:
    """Look up an instance type by EC2 (`p5.48xlarge`) or SageMaker (`ml.p5.48xlarge`) name.

    Raises `CatalogError` naming close matches when the type is not in the catalog.
    """
    instances = catalog().instances
    key = normalize_name(name)
    found = instances.get(key)
    if found is not None:
        return found
    family = key.split(".", 1)[0]
    close = [n for n in instances if n.split(".", 1)[0] == family and family]
    if not close:
        close = difflib.get_close_matches(key, list(instances), n=6, cutoff=0.6)
    if close:
        hint = "close matches: " + ", ".join(close)
    else:
        families = sorted({n.split(".", 1)[0] for n in instances})
        hint = "known families: " + ", ".join(families)
    raise CatalogError(f"unknown instance type {name!r} (not in the mlstack catalog); {hint}")


def all_instances() -> tuple[InstanceType, ...]:
    """Every catalog entry, in file order (grouped by family, ascending size)."""
    return tuple(catalog().instances.values())
