"""Inference layer: SageMaker endpoints (real-time, serverless, async) and an HTTPS invoke API."""

from mlstack.constructs.inference.endpoint_parts import MetricOptions
from mlstack.constructs.inference.image import ServingImage
from mlstack.constructs.inference.invoke_api import InvokeApi
from mlstack.constructs.inference.model_endpoint import ModelEndpoint
from mlstack.constructs.inference.props import (
    AlarmThresholds,
    AsyncScaling,
    CaptureMode,
    DataCapture,
    ScalingMetric,
    Variant,
    VariantScaling,
)
from mlstack.constructs.inference.serving import AsyncServing, RealtimeServing, ServerlessServing

__all__ = [
    "AlarmThresholds",
    "AsyncScaling",
    "AsyncServing",
    "CaptureMode",
    "DataCapture",
    "InvokeApi",
    "MetricOptions",
    "ModelEndpoint",
    "RealtimeServing",
    "ScalingMetric",
    "ServerlessServing",
    "ServingImage",
    "Variant",
    "VariantScaling",
]
