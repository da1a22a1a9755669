"""The top level of a blueprint file: identity, environment, removal policy and the sections of each layer."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.config.ai_services import AiServicesConfig
from mlstack.config.base import StrictModel, every_problem
from mlstack.config.budget import BudgetConfig
from mlstack.config.inference import InferenceConfig
from mlstack.config.inference_eks import EksInferenceConfig
from mlstack.config.mlops import MlopsConfig
from mlstack.config.network import NetworkConfig, default_interface_endpoints
from mlstack.config.training import TrainingConfig
from mlstack.config.training_rules import training_problems

_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_DIRECTIONS = (("north", "n"), ("south", "s"), ("east", "e"), ("west", "w"), ("central", "c"))


def az_id_prefix(region: str) -> str:
    """The AZ-ID prefix of a region: us-east-1 -> use1, ap-southeast-2 -> apse2, eu-central-1 -> euc1."""
    country, *middle, number = region.split("-")
    short = ""
    for word in middle:
        if word == "gov":
            short += "g"
            continue
        for long, letter in _DIRECTIONS:
            word = word.replace(long, letter)
        short += word
    return f"{country}{short}{number}"


def _route_inference(data: dict[str, Any]) -> dict[str, Any]:
    """`inference: {engine: eks, ...}` -> `inference_eks`; `engine: sagemaker` (the default) is dropped."""
    section = data.get("inference")
    if data.get("inference_eks") is not None and section is not None:
        # A dump of a validated blueprint holds `inference_eks` alone (and validates again); never both.
        raise ValueError("inference_eks: write the section as inference: with engine: eks, once")
    if not isinstance(section, dict) or "engine" not in section:
        return data
    engine = section["engine"]
    if engine == "eks":
        return {**{k: v for k, v in data.items() if k != "inference"}, "inference_eks": section}
    if engine == "sagemaker":
        return {**data, "inference": {k: v for k, v in section.items() if k != "engine"}}
    raise ValueError(f"inference.engine {engine!r} is not known; use sagemaker (the default) or eks")


class EnvConfig(StrictModel):
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    """12-digit account ID. Omit for an account-agnostic template (deploys to the CLI's current account)."""
    region: str = "us-east-1"

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.match(value):
            raise ValueError(f"{value!r} is not an AWS region name; use e.g. 'us-east-1'")
        return value


class BlueprintConfig(StrictModel):
    """A reference architecture: what to build, where, and how big."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
    """Lower-case name; CloudFormation stack names carry it, so two blueprints deploy side by side."""
    description: str = Field(min_length=1, max_length=200)
    """One line, shown by `mlstack list`."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    removal: Literal["retain", "destroy"] = "retain"
    """`retain` keeps keys, logs, buckets and file systems when a stack is deleted; `destroy` is for sandboxes."""
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    training: TrainingConfig | None = None
    """A training cluster (TrainingClusterStack); omit for none."""
    inference: InferenceConfig | None = None
    """Model endpoints (InferenceStack); omit for none. With `engine: eks` the section is read as
    `EksInferenceConfig` (vLLM on EKS) and held in `inference_eks` instead."""
    inference_eks: EksInferenceConfig | None = None
    """The `inference:` section when it says `engine: eks` (write it there, not under this key)."""
    ai_services: AiServicesConfig | None = None
    """Managed AI service API and document pipeline (AiServicesStack); omit for none."""
    mlops: MlopsConfig | None = None
    """SageMaker pipeline, model registry, approval-to-deploy and monitoring (MlopsStack); omit for none."""
    budget: BudgetConfig | None = None
    """A monthly AWS Budgets cost budget on the blueprint's `mlstack:blueprint` tag, notifying the training stack's
    alarm topic (`mlstack/config/budget.py`); omit for none."""

    @model_validator(mode="before")
    @classmethod
    def _layer_endpoints(cls, data: Any) -> Any:
        # Unset `network.interface_endpoints` means "what my layers use"; it depends on the other sections.
        if not isinstance(data, dict):
            return data
        data = _route_inference(data)
        network = data.get("network") or {}
        if not isinstance(network, dict) or "interface_endpoints" in network:
            return data
        training = data.get("training")
        cluster = training.get("cluster") if isinstance(training, dict) else None
        admin_host = cluster.get("admin_host", True) if isinstance(cluster, dict) else True
        inference = data.get("inference")
        engine = training.get("engine", "eks") if isinstance(training, dict) else "eks"
        endpoints = inference.get("endpoints") if isinstance(inference, dict) else None
        if data.get("inference_eks") is not None:
            eks = data["inference_eks"]
            cluster = eks.get("cluster") if isinstance(eks, dict) else None
            admin_host = cluster.get("admin_host", True) if isinstance(cluster, dict) else True
            # The serving nodes call what training nodes do, and Secrets Manager for the API key.
            keys = default_interface_endpoints(training=True, admin_host=admin_host is not False, inference=False)
            keys.append("secretsmanager")
            return {**data, "network": {**network, "interface_endpoints": keys}}
        keys = default_interface_endpoints(
            training=training is not None,
            admin_host=admin_host is not False,
            inference=inference is not None,
            # Serverless endpoints run outside the VPC; any other mode puts hosts in it.
            inference_in_vpc=not isinstance(endpoints, list)
            or any(not isinstance(e, dict) or e.get("mode") != "serverless" for e in endpoints),
            others=any(data.get(layer) is not None for layer in ("mlops", "ai_services")),
            engine=engine if isinstance(engine, str) else "eks",
        )
        return {**data, "network": {**network, "interface_endpoints": keys}}

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("description must be one line; move details into comments in the file")
        return value.strip()

    @model_validator(mode="after")
    def _cross_sections(self) -> BlueprintConfig:
        """Rules that span sections, all checked: every broken one is reported, one line each."""
        problems = self._zone_problems()
        if self.training is not None:
            # AZs must be the network's; EFA and FSx share one AZ.
            problems += self.training.check_network(self.network) + self.training.check_zones(self.zones)
            # The engine's and the example job's rules (training_rules.py), every one reported.
            problems += training_problems(self.training, self.zones)
        if self.inference is not None:
            # An isolated network needs the ECR and S3 endpoints; a DLC image's registry account fits the region.
            problems += self.inference.check_network(self.network) + self.inference.check_region(self.env.region)
        if self.budget is not None and self.training is None:
            problems.append(
                "budget: needs a training section: its notifications go to the training stack's alarm topic; add "
                "training or remove budget"
            )
        if self.ai_services is not None:
            # Each AI service used is offered in env.region.
            problems += self.ai_services.check_region(self.env.region)
        if problems:
            raise every_problem(type(self).__name__, problems, self.model_dump())
        return self

    def _zone_problems(self) -> list[str]:
        region = self.env.region
        problems = [
            f"network.availability_zones: {name!r} is not in region {region!r}; use {region}a, {region}b, ..."
            for name in self.network.availability_zones or []
            if not name.startswith(region)
        ]
        prefix = az_id_prefix(region)
        problems += [
            f"network.availability_zone_ids: {az_id!r} is not in region {region!r}; IDs there look like {prefix}-az1"
            for az_id in self.network.availability_zone_ids or []
            if not az_id.startswith(prefix + "-")
        ]
        return problems

    @property
    def stack_ids(self) -> list[str]:
        """The stacks this blueprint deploys, in order (stable construct IDs; `blueprint.build` creates them)."""
        ids = ["NetworkStack"]
        if self.training is not None:
            ids.append("TrainingClusterStack")
        if self.inference is not None:
            ids += ["DataStack", "InferenceStack"]
        if self.inference_eks is not None:
            ids.append("InferenceStack")
        if self.mlops is not None:
            ids.append("MlopsStack")
        if self.ai_services is not None:
            ids.append("AiServicesStack")
        return ids

    @property
    def zones(self) -> list[str]:
        """AZ names or IDs of the network, in order."""
        return self.network.zones(self.env.region)

    @property
    def retain(self) -> bool:
        return self.removal == "retain"
