"""What each SageMaker endpoint mode offers: one table that the `ModelEndpoint` construct and the inference plan
both read, instead of each branching on the mode name.

Facts (SageMaker Developer Guide: "Real-time inference", "Serverless Inference" feature exclusions, "Asynchronous
inference"; SageMaker endpoint quotas for payload sizes): serverless endpoints run outside the customer VPC with
no instances, no network isolation and no data capture; real-time and async endpoints run instances in the VPC.
No CDK import here: planning must not start jsii.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EndpointMode:
    """One endpoint mode and what it offers."""

    name: str
    """`realtime`, `serverless` or `async` (the blueprint's `mode`)."""
    instance_backed: bool
    """Runs ML instances (instance types, counts, Application Auto Scaling, host AMIs, quotas per type)."""
    in_vpc: bool
    """Hosts take ENIs in the VPC's subnets (and so may be network-isolated)."""
    data_capture: bool
    """Request/response capture to S3 is offered."""
    payload_limit_bytes: int | None
    """InvokeEndpoint request payload limit; None for async (callers upload the request to S3)."""
    invoke_actions: tuple[str, ...]
    """IAM actions a caller needs on the endpoint."""
    variant_alarms: str
    """What the per-variant alarms watch (for the plan's resource list)."""


REALTIME = EndpointMode(
    name="realtime",
    instance_backed=True,
    in_vpc=True,
    data_capture=True,
    payload_limit_bytes=6 * 1024 * 1024,
    invoke_actions=("sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"),
    variant_alarms="p99 latency and 5xx errors per variant",
)
SERVERLESS = EndpointMode(
    name="serverless",
    instance_backed=False,
    in_vpc=False,
    data_capture=False,
    payload_limit_bytes=4 * 1024 * 1024,
    invoke_actions=("sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"),
    variant_alarms="p99 latency and 5xx errors per variant",
)
ASYNC = EndpointMode(
    name="async",
    instance_backed=True,
    in_vpc=True,
    data_capture=True,
    payload_limit_bytes=None,
    invoke_actions=("sagemaker:InvokeEndpointAsync",),
    variant_alarms="p99 latency and 5xx errors per variant",
)
MODES: dict[str, EndpointMode] = {m.name: m for m in (REALTIME, SERVERLESS, ASYNC)}


def endpoint_mode(name: str) -> EndpointMode:
    """The mode called `name`; a one-line error for an unknown one."""
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown endpoint mode {name!r}; use one of {', '.join(MODES)}") from None
