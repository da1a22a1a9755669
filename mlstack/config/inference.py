"""The `inference:` section of a blueprint (InferenceStack): one model, its endpoints, and the traffic they serve.

The section's parts live in their own modules and are importable from here as well: the model, its artifact and
image (`inference_model`), a variant with its host AMI and autoscaling (`inference_variant`), the endpoint modes
(`inference_endpoints`). Defined here: the invoke API and `InferenceConfig`, whose validator checks what spans
endpoints and the model (unique names and construct IDs, the model on each host, the invoke API's target), and
the cross-section rules the blueprint calls (`check_region`, `check_network`).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from mlstack.catalog.endpoint_modes import MODES, endpoint_mode
from mlstack.config.base import StrictModel, email_addresses
from mlstack.config.inference_endpoints import (
    SERVERLESS_MEMORY_MB,
    AlarmConfig,
    AsyncEndpointConfig,
    DataCaptureConfig,
    EndpointConfig,
    RealtimeEndpointConfig,
    ServerlessEndpointConfig,
)
from mlstack.config.inference_fit import (
    LMI_MODEL_LOADING_TIMEOUT,
    StartupLimits,
    host_memory_problem,
    neuron_options_problem,
    startup_limits,
    weights_gib,
)
from mlstack.config.inference_image import (
    dlc_account_problem,
    gpu_ami_for,
    gpu_ami_problem,
    image_cuda,
    is_nvidia_host,
)
from mlstack.config.inference_model import (
    MODEL_ID_VARIABLES,
    ArtifactConfig,
    DlcImage,
    EcrImage,
    ImageConfig,
    InferenceModelConfig,
    TrafficConfig,
)
from mlstack.config.inference_variant import (
    NEURON_AMI,
    AsyncScalingConfig,
    InferenceAmiVersion,
    RealtimeScalingConfig,
    VariantConfig,
)
from mlstack.config.network import NetworkConfig

__all__ = [
    "INVOKE_LIMIT_SECONDS",
    "MAX_INVOKE_API_TIMEOUT",
    "MODEL_ID_VARIABLES",
    "NEURON_AMI",
    "PAYLOAD_LIMIT_BYTES",
    "SERVERLESS_MEMORY_MB",
    "AlarmConfig",
    "ArtifactConfig",
    "AsyncEndpointConfig",
    "AsyncScalingConfig",
    "DataCaptureConfig",
    "DlcImage",
    "EcrImage",
    "EndpointConfig",
    "ImageConfig",
    "InferenceAmiVersion",
    "InferenceConfig",
    "InferenceModelConfig",
    "InvokeApiConfig",
    "RealtimeEndpointConfig",
    "RealtimeScalingConfig",
    "ServerlessEndpointConfig",
    "TrafficConfig",
    "VariantConfig",
]

_STACK_IDS = frozenset(
    {"AccessLogs", "DataBucket", "InvokeApi", "InvokeUrl", "ModelArtifact", "AlarmTopic", "AlarmTopicArn"}
)
"""Construct IDs the InferenceStack gives its own resources and outputs; no endpoint may take one."""


INVOKE_LIMIT_SECONDS = 60
"""SageMaker real-time and serverless InvokeEndpoint: the container must answer within 60 s (SageMaker
"Invoke real-time endpoints" / InvokeEndpoint API reference); a longer client timeout cannot help."""
MAX_INVOKE_API_TIMEOUT = INVOKE_LIMIT_SECONDS + 10
"""The handler's read timeout is the function's minus 5 s: 70 s leaves it at 65 s, just above SageMaker's 60."""
PAYLOAD_LIMIT_BYTES = {name: m.payload_limit_bytes for name, m in MODES.items() if m.payload_limit_bytes is not None}
"""InvokeEndpoint request payload limit per mode (SageMaker endpoint quotas: 6 MB real-time, 4 MB serverless)."""


class InvokeApiConfig(StrictModel):
    """An HTTPS URL (Lambda function URL, IAM auth) in front of one real-time or serverless endpoint."""

    endpoint: str
    """Name of the endpoint in `endpoints` that the API invokes."""
    timeout_seconds: int = Field(default=MAX_INVOKE_API_TIMEOUT, ge=6, le=900)
    """Function timeout; the handler waits `timeout_seconds - 5` for the model. At most 70: SageMaker fails an
    invocation after 60 s anyway (use an async endpoint for longer requests)."""
    memory_mb: int = Field(default=256, ge=128, le=10240)
    callers: list[str] = Field(default_factory=list, max_length=20)
    """IAM role or user ARNs that may call the URL: the stack grants them lambda:InvokeFunctionUrl and
    lambda:InvokeFunction on the function (a resource-based permission). Default: none (grant in your own code)."""

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if value > MAX_INVOKE_API_TIMEOUT:
            raise ValueError(
                f"invoke_api.timeout_seconds {value} cannot help: SageMaker InvokeEndpoint answers within "
                f"{INVOKE_LIMIT_SECONDS} s or fails; use at most {MAX_INVOKE_API_TIMEOUT} (or mode: async for "
                "longer requests)"
            )
        return value

    @field_validator("callers")
    @classmethod
    def _callers(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", v)]
        if bad:
            raise ValueError(
                f"invoke_api.callers {', '.join(map(repr, bad))} are not IAM role or user ARNs; use e.g. "
                "arn:aws:iam::123456789012:role/app"
            )
        return value


class InferenceConfig(StrictModel):
    """A model and the endpoints that serve it."""

    model: InferenceModelConfig
    endpoints: list[EndpointConfig] = Field(min_length=1, max_length=5)
    invoke_api: InvokeApiConfig | None = None
    alarm_emails: list[str] = Field(default_factory=list, max_length=20)
    """Addresses subscribed to the stack's alarm topic (each confirms by e-mail). Every alarm notifies the topic;
    subscribe other targets (chat, paging) to the topic's ARN, output `AlarmTopicArn`."""

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        return email_addresses("alarm_emails", value)

    @model_validator(mode="after")
    def _references(self) -> InferenceConfig:
        names = [e.name for e in self.endpoints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"endpoint names {', '.join(dupes)} appear more than once; name each endpoint once")
        self._check_construct_ids()
        self._check_hosts()
        if self.invoke_api is not None:
            target = next((e for e in self.endpoints if e.name == self.invoke_api.endpoint), None)
            if target is None:
                raise ValueError(
                    f"invoke_api.endpoint {self.invoke_api.endpoint!r} is not an endpoint here; use one of "
                    f"{', '.join(names)}"
                )
            if target.mode == "async":
                raise ValueError(
                    f"invoke_api.endpoint {target.name!r} is async: callers upload to S3 and call "
                    "InvokeEndpointAsync themselves; point invoke_api at a realtime or serverless endpoint"
                )
        return self

    def hosted_variants(self) -> list[tuple[str, VariantConfig]]:
        """(endpoint name, variant) of every instance-backed variant (real-time and async)."""
        result: list[tuple[str, VariantConfig]] = []
        for endpoint in self.endpoints:
            if isinstance(endpoint, RealtimeEndpointConfig):
                result += [(endpoint.name, v) for v in endpoint.variants]
            elif isinstance(endpoint, AsyncEndpointConfig):
                result.append((endpoint.name, endpoint.variant))
        return result

    def _check_hosts(self) -> None:
        model = self.model
        weights = weights_gib(model.parameters_billion, model.precision)
        tag = model.image.tag
        for endpoint, variant in self.hosted_variants():
            problem = (
                host_memory_problem(weights, variant.instance_type)
                or neuron_options_problem(model.environment, model.precision, variant.instance_type)
                or (
                    gpu_ami_problem(variant.inference_ami_version, image_cuda(tag), tag)
                    if is_nvidia_host(variant.instance_type)
                    else None
                )
            )
            if problem:
                raise ValueError(f"endpoint {endpoint!r}, variant {variant.name}: {problem}")
        if model.neuron_compiled_graph is not None and not any(v.is_neuron for _, v in self.hosted_variants()):
            raise ValueError(
                "model.neuron_compiled_graph: no variant runs on a Neuron host (ml.inf2, ml.trn1); remove it or "
                "pick an Inferentia2/Trainium instance type"
            )

    def startup(self, variant: VariantConfig) -> StartupLimits:
        """Start-up limits of `variant`: the blueprint's, or sized from the weights and, on a Neuron host, from
        whether the container compiles the model at start-up (no `neuron_compiled_graph`)."""
        model = self.model
        return startup_limits(
            weights_gib(model.parameters_billion, model.precision),
            variant.instance_type,
            startup_timeout_seconds=variant.startup_timeout_seconds,
            download_timeout_seconds=variant.download_timeout_seconds,
            volume_size_gb=variant.volume_size_gb,
            compiles_at_startup=variant.is_neuron and not model.precompiled_for_neuron,
        )

    def container_environment(self, endpoint: EndpointConfig) -> dict[str, str]:
        """The model's container environment on `endpoint`: the model's (HF_TASK, the compiled graph path) and, for
        the LMI container when a variant waits longer than LMI's own 1800 s loading timeout, that timeout raised to
        the health check's (otherwise the model server stops loading before SageMaker stops waiting)."""
        environment = self.model.container_environment
        image = self.model.image
        if not image.repository.startswith("djl-inference") or "OPTION_MODEL_LOADING_TIMEOUT" in environment:
            return environment
        waits = [
            self.startup(v).startup_timeout_seconds or 0 for name, v in self.hosted_variants() if name == endpoint.name
        ]
        longest = max(waits, default=0)
        if longest > LMI_MODEL_LOADING_TIMEOUT:
            environment["OPTION_MODEL_LOADING_TIMEOUT"] = str(longest)
        return environment

    def host_ami(self, variant: VariantConfig) -> str | None:
        """The InferenceAmiVersion of `variant`: the blueprint's; the Neuron AMI on Inferentia2/Trainium; on an
        NVIDIA host the oldest AMI whose driver supports the CUDA version the image tag names; else None
        (SageMaker's default)."""
        if variant.ami_version is not None or not is_nvidia_host(variant.instance_type):
            return variant.ami_version
        return gpu_ami_for(image_cuda(self.model.image.tag))

    def check_region(self, region: str) -> list[str]:
        """Cross-section rule: a DLC image's registry account fits its registry region (the blueprint's default)."""
        image = self.model.image
        if not isinstance(image, DlcImage):
            return []
        problem = dlc_account_problem(image.account, image.region or region)
        return [problem] if problem else []

    def _check_construct_ids(self) -> None:
        """Endpoint names become construct IDs (`a-b` -> `AB`, plus an `ABEndpointName` output): two names that
        map to one ID, or a name that maps onto the stack's own IDs, would fail the synth."""
        taken: dict[str, str] = dict.fromkeys(_STACK_IDS, "the InferenceStack")
        for endpoint in self.endpoints:
            for construct_id in (endpoint.construct_id, f"{endpoint.construct_id}EndpointName"):
                owner = taken.get(construct_id)
                if owner is not None:
                    raise ValueError(
                        f"endpoint name {endpoint.name!r} becomes construct ID {construct_id!r}, which {owner} "
                        "already uses; rename the endpoint"
                    )
                taken[construct_id] = f"endpoint {endpoint.name!r}"

    def check_network(self, network: NetworkConfig) -> list[str]:
        """Cross-section rule: without NAT, hosts in the VPC reach ECR and S3 only through VPC endpoints."""
        in_vpc = [e.name for e in self.endpoints if endpoint_mode(e.mode).in_vpc]
        if network.nat_gateways or not in_vpc:
            return []
        missing = [
            f"{k} in network.interface_endpoints"
            for k in ("ecr.api", "ecr.dkr")
            if k not in network.interface_endpoints
        ]
        if "s3" not in network.gateway_endpoints:
            missing.append("s3 in network.gateway_endpoints")
        if not missing:
            return []
        return [
            f"network.nat_gateways is 0, so endpoint(s) {', '.join(in_vpc)} can pull the image and the model "
            f"artifact only through VPC endpoints; add {' and '.join(missing)} (or a NAT gateway)"
        ]

    @property
    def needs_data_bucket(self) -> bool:
        return any(
            isinstance(e, AsyncEndpointConfig) or (isinstance(e, RealtimeEndpointConfig) and e.data_capture)
            for e in self.endpoints
        )
