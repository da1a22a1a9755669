"""Inference layer: SageMaker endpoints (real-time, serverless, async) and an HTTPS invoke API."""

from mlstack.constructs.inference.invoke_api import InvokeApi
from mlstack.constructs.inference.model_endpoint import ModelEndpoint, ServingImage

__all__ = ["InvokeApi", "ModelEndpoint", "ServingImage"]
