"""What every training stack adds for day two, whatever its engine: the encrypted alarm topic, the cluster's
dashboard and alarms (`mlstack.design.observability`), the blueprint's budget and the Capacity Block expiry rule
(`mlstack.design.cost`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions

from mlstack.catalog.instances import get_instance
from mlstack.config.budget import BUDGET_TAG
from mlstack.constructs.security.budget import ProjectBudget
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training import versions
from mlstack.constructs.training.capacity_block import CapacityBlockExpiry
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.observability import TrainingObservability
from mlstack.constructs.training.scale_to_zero import ScaleToZero
from mlstack.design.cost import budget_design, capacity_block_reservations, scale_to_zero_pools
from mlstack.design.hyperpod_governance import autoscaling
from mlstack.design.observability import cluster_name_of, observability_design
from mlstack.stacks.base import MlStack
from mlstack.stacks.network import NetworkStack

if TYPE_CHECKING:  # the engine's own stack module imports these; an EKS synth needs neither (aws_batch, aws_sagemaker)
    from mlstack.constructs.training.batch import BatchMultiNodeTraining
    from mlstack.constructs.training.hyperpod import HyperPodCluster


@dataclass
class Operations:
    topic: sns.Topic
    observability: TrainingObservability
    budget: ProjectBudget | None
    capacity_block: CapacityBlockExpiry | None
    scale_to_zero: ScaleToZero | None
    budget_scale_to_zero: ScaleToZero | None


def add_operations(
    stack: MlStack,
    network: NetworkStack,
    *,
    fsx: FsxLustre | None,
    cluster: TrainingCluster | None = None,
    job_log_group: logs.ILogGroup | None = None,
    batch: BatchMultiNodeTraining | None = None,
    hyperpod: HyperPodCluster | None = None,
) -> Operations:
    """Constructs `AlarmTopic`, `Observability`, `Budget` and `CapacityBlockExpiry` in `stack`.

    `cluster`: the EKS cluster whose Container Insights add-on writes the step lines (its add-on waits for the
    log group this creates, or its Fluent Bit would create the group first and the stack's create would fail);
    `job_log_group`: the engine's own job log group (batch); `batch`: the engine's queue and compute environment
    (batch), which a Capacity Block's expiry takes to zero like the EKS node groups on the block; `hyperpod`: the
    HyperPod cluster whose accelerated instance groups the budget's action takes to zero (hyperpod engines)."""
    blueprint = stack.blueprint
    training = blueprint.training
    if training is None:
        raise ValueError(f"blueprint {blueprint.name!r} has no training section")
    topic = stack.add_alarm_topic(network.key, training.alarm_emails)
    design = observability_design(blueprint)
    observability = TrainingObservability(
        stack,
        "Observability",
        dashboard_name=design.dashboard_name,
        widgets=design.widgets,
        alarms=design.alarms,
        topic=topic,
        step_log=design.step_log,
        step_metrics=design.step_metrics,
        step_log_group=job_log_group,
        file_system_id=fsx.file_system.ref if fsx is not None else None,
        key=network.key,
        log_retention_days=training.cluster.log_retention_days,
        removal_policy=stack.removal_policy,
        host_agent=design.host_agent,
        composite_alarms=design.composite_alarms,
    )
    if cluster is not None and observability.shared_log_group is not None:
        cluster.addons[versions.CLOUDWATCH_OBSERVABILITY].node.add_dependency(observability.shared_log_group.resource)
    if cluster is not None and observability.host_log_group is not None:
        # The GPU nodes' CloudWatch agent writes to the kernel-log group and may not create it: the group first.
        for group in cluster.node_groups.values():
            if group.host_agent is not None:
                group.nodegroup.node.add_dependency(observability.host_log_group)
    budget = None
    budget_scale: ScaleToZero | None = None
    spec = budget_design(blueprint)
    action_topic: sns.Topic | None = None
    if spec is not None and spec.scale_to_zero_at_percent is not None:
        # A notification takes one SNS subscriber: the scale-down has a topic of its own, and the function tells
        # the alarm topic what it did.
        action_topic = sns.Topic(stack, "BudgetActionTopic", master_key=network.key, enforce_ssl=True)
        # Karpenter's pools are Kubernetes objects: the function then runs in the cluster's VPC to reach the API.
        pools = [p.name for p in scale_to_zero_pools(blueprint)] if cluster is not None else []
        # With HyperPod's managed Karpenter the pools own the groups' instances: stopping the pools (and deleting
        # their NodeClaims) removes them with a Kubernetes drain, where UpdateCluster would take them away undrained
        # and may not accept a count on a Karpenter-managed group at all.
        managed = blueprint.training is not None and autoscaling(blueprint.training) is not None
        budget_scale = ScaleToZero(
            stack,
            "BudgetScaleToZero",
            key=network.key,
            cluster_name=cluster_name_of(blueprint) if cluster is not None else None,
            nodegroups=[g.nodegroup for g in (cluster.node_groups.values() if cluster else [])],
            job_queues=[batch.job_queue.ref] if batch is not None else [],
            compute_environments=[batch.compute_environment.ref] if batch is not None else [],
            notify_topic=topic,
            notify_key=network.key,
            hyperpod_cluster_name=hyperpod.cluster_name if hyperpod is not None else None,
            hyperpod_cluster_arn=hyperpod.cluster_arn if hyperpod is not None else None,
            hyperpod_groups=[
                g.name
                for g in (hyperpod.instance_groups if hyperpod is not None and not managed else ())
                if get_instance(g.instance_type).accelerator is not None
            ],
            hyperpod_execution_roles=[hyperpod.role.role_arn] if hyperpod is not None and not managed else [],
            failure_topic=topic,
            pools=pools,
            pools_cluster=cluster.cluster if cluster is not None and pools else None,
            pools_subnets=network.network.private_subnets if pools else [],
            kubernetes_group="mlstack:budget-scale-to-zero",
            description=f"scale the training capacity to zero at {spec.scale_to_zero_at_percent}% of the budget",
            removal_policy=stack.removal_policy,
        )
        action_topic.add_subscription(subscriptions.LambdaSubscription(budget_scale.function))
    if spec is not None:
        budget = ProjectBudget(
            stack,
            "Budget",
            monthly_usd=spec.monthly_usd,
            tag_key=BUDGET_TAG,
            tag_value=spec.tag_value,
            topic=topic,
            thresholds_percent=spec.thresholds_percent,
            forecast_percent=spec.forecast_percent,
            action_topic=action_topic,
            action_percent=spec.scale_to_zero_at_percent,
            # The alarm e-mails get the scale-down's notification from AWS Budgets itself, as the other thresholds'.
            action_emails=training.alarm_emails if action_topic is not None else [],
        )
    blocks = capacity_block_reservations(training)
    capacity_block = scale = None
    if blocks:
        on_blocks = {g.name for g in training.node_groups if g.capacity.type == "capacity_block"}
        scale = ScaleToZero(
            stack,
            "ScaleToZero",
            key=network.key,
            cluster_name=cluster_name_of(blueprint) if cluster is not None else None,
            nodegroups=[
                g.nodegroup for name, g in (cluster.node_groups if cluster else {}).items() if name in on_blocks
            ],
            job_queues=[batch.job_queue.ref] if batch is not None else [],
            compute_environments=[batch.compute_environment.ref] if batch is not None else [],
            # No message of its own: the Capacity Block rule already tells the alarm topic.
            notify_topic=None,
            notify_key=None,
            # HyperPod takes reserved capacity through training plans, not the Capacity Blocks of this rule.
            hyperpod_cluster_name=None,
            hyperpod_cluster_arn=None,
            hyperpod_groups=[],
            hyperpod_execution_roles=[],
            failure_topic=topic,
            # Karpenter handles a reservation's interruption in its pools itself (its interruption queue).
            pools=[],
            pools_cluster=None,
            pools_subnets=[],
            kubernetes_group="mlstack:scale-to-zero",
            description="scale the training capacity on an expiring Capacity Block to zero",
            removal_policy=stack.removal_policy,
        )
        capacity_block = CapacityBlockExpiry(
            stack,
            "CapacityBlockExpiry",
            reservation_ids=blocks,
            topic=topic,
            scale_function=scale.function,
            what="the training nodes",
        )
    return Operations(topic, observability, budget, capacity_block, scale, budget_scale)
