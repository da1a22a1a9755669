"""`MlopsStack`'s resources: buckets, alarm topic, registry, `MlopsPipeline`, `ApprovalDeploy`, `StudioDomain`."""

from __future__ import annotations

from collections import Counter

from mlstack.config.mlops import MlopsConfig
from mlstack.design.footprint.parts import (
    ALARM,
    PERMISSION,
    QUEUE,
    QUEUE_POLICY,
    RULE,
    SECURITY_GROUP,
    Footprint,
    bucket,
    closed_group,
    function,
    role,
    topic,
)


def mlops_pipeline() -> Footprint:
    """`MlopsPipeline`: the pipeline, its role and the jobs' role (each with a policy), the jobs' closed
    self-referencing group, the failed-execution rule."""
    return Counter({"AWS::SageMaker::Pipeline": 1, RULE: 1}) + role() + role() + closed_group(self_referencing=True)


def approval_deploy() -> Footprint:
    """`ApprovalDeploy`: the deploy function (role, policy, log group) with its dead-letter queue, the model and
    monitor roles, the endpoint's group, four rules (approval, in service, endpoint failed, monitoring; the first
    two invoke the function), three alarms (function errors, dead letters, failed deployment from a metric
    filter) and the reconcile custom resource (the same function)."""
    return (
        function()
        + role()
        + role()
        + Counter(
            {
                SECURITY_GROUP: 1,
                RULE: 4,
                PERMISSION: 2,
                QUEUE: 1,
                QUEUE_POLICY: 1,
                ALARM: 3,
                "AWS::Logs::MetricFilter": 1,
                "Custom::EndpointReconcile": 1,
            }
        )
    )


def studio_domain(users: int) -> Footprint:
    """`StudioDomain`: the domain, its closed self-referencing group, the user role and policy, a profile per user."""
    return (
        Counter({"AWS::SageMaker::Domain": 1, "AWS::SageMaker::UserProfile": users})
        + role()
        + closed_group(self_referencing=True)
    )


def mlops_stack(mlops: MlopsConfig) -> Footprint:
    found = topic(len(mlops.alarm_emails)) + bucket() + bucket()  # access logs, artifacts
    found["AWS::SageMaker::ModelPackageGroup"] = 1
    found += mlops_pipeline() + approval_deploy()
    if mlops.studio is not None:
        found += studio_domain(len(mlops.studio.users))
    return found
