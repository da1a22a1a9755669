"""`DataStack`'s and `InferenceStack`'s resources: the model bucket and image repository, then `ModelEndpoint`s,
the stack's buckets and alarm topic, and `InvokeApi`; for `inference: {engine: eks}`, the serving cluster's
`InferenceStack` (`mlstack.design.serving_eks.stack_parts`, and `Karpenter` with one pool per endpoint where
`capacity_manager` is karpenter)."""

from __future__ import annotations

from collections import Counter

from mlstack.config.inference import (
    AsyncEndpointConfig,
    InferenceConfig,
    RealtimeEndpointConfig,
    ServerlessEndpointConfig,
)
from mlstack.config.inference_eks import EksInferenceConfig
from mlstack.design.footprint.elastic import karpenter
from mlstack.design.footprint.parts import ALARM, SECURITY_GROUP, Footprint, bucket, function, role, topic
from mlstack.design.inference import inference_storage
from mlstack.design.serving_eks import stack_parts
from mlstack.design.serving_pools import serving_pools

SCALABLE_TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
SCALING_POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"

ASYNC_FAILURE_ALARMS = 3
"""RequestDownloadFailures, InvocationFailures, ResponseUploadFailures (`AsyncServing.alarm_rules`); a fourth,
NotificationFailures, with notifications; then OldestRequest and BacklogWithoutCapacity."""


def data_stack(inference: InferenceConfig) -> Footprint:
    """The model bucket and its access-log bucket (unless `artifact.existing_bucket`), the ECR repository (an `ecr`
    image with `create_repository`)."""
    storage = inference_storage(inference)
    found: Footprint = Counter()
    if storage.model_bucket:
        found += bucket() + bucket()
    if storage.image_repository is not None:
        found["AWS::ECR::Repository"] += 1
    return found


def model_endpoint(spec: RealtimeEndpointConfig | ServerlessEndpointConfig | AsyncEndpointConfig) -> Footprint:
    """`ModelEndpoint`: execution role and policy, its security group (not serverless: outside the VPC), model,
    config, endpoint; per variant two alarms (p99 latency, 5xx) and its scaling; the mode's own alarms, scaling
    and async topics (`serving.py`)."""
    found = role() + Counter({"AWS::SageMaker::Model": 1, "AWS::SageMaker::EndpointConfig": 1})
    found["AWS::SageMaker::Endpoint"] = 1
    if isinstance(spec, ServerlessEndpointConfig):
        found[ALARM] += 2
        return found
    found[SECURITY_GROUP] += 1
    if isinstance(spec, RealtimeEndpointConfig):
        for variant in spec.variants:
            found[ALARM] += 2
            if variant.autoscaling is not None:
                found += Counter({SCALABLE_TARGET: 1, SCALING_POLICY: 1})
        return found
    found[ALARM] += 2 + ASYNC_FAILURE_ALARMS + (1 if spec.notifications else 0) + 2
    if spec.notifications:
        found += topic() + topic()  # success and error
    scaling = spec.autoscaling
    if scaling is not None:
        found += Counter({SCALABLE_TARGET: 1, SCALING_POLICY: 1})
        if scaling.scales_to_zero:
            # The step policy that adds the first instance, and the alarm CDK creates to drive it.
            found += Counter({SCALING_POLICY: 1, ALARM: 1})
    return found


def invoke_api() -> Footprint:
    """`InvokeApi`: the function (role, policy, log group) and its IAM-authenticated URL."""
    return function() + Counter({"AWS::Lambda::Url": 1})


def inference_stack(inference: InferenceConfig) -> Footprint:
    """Access-log bucket, data bucket (data capture / async results), alarm topic, the endpoints, `InvokeApi`."""
    found = bucket() + topic(len(inference.alarm_emails))
    if inference_storage(inference).data_bucket:
        found += bucket()
    for spec in inference.endpoints:
        found += model_endpoint(spec)
    if inference.invoke_api is not None:
        found += invoke_api()
    return found


def eks_inference_stack(config: EksInferenceConfig) -> Footprint:
    """`InferenceStack` of `engine: eks`: `stack_parts`, the one list of its resources (the plan's rows), by type."""
    found: Footprint = Counter()
    for part in stack_parts(config):
        found[part.cfn_type] += part.count
    found += karpenter(serving_pools(config, ()))  # the zones do not change what is created
    return +found  # a part of count 0 (no admin host) is no resource
