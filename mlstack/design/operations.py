"""The resources the training stack's day-two constructs create, by CloudFormation type (no CDK import): what
`mlstack plan` lists for `mlstack.stacks.training_ops.add_operations`."""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.config import BlueprintConfig
from mlstack.design.cost import budget_design, capacity_block_reservations, scale_to_zero_pools
from mlstack.design.observability import observability_design

STACK = "TrainingClusterStack"


@dataclass(frozen=True)
class OperationsResource:
    stack: str
    cfn_type: str
    label: str
    detail: str
    count: int = 1


def operations_resources(config: BlueprintConfig) -> list[OperationsResource]:
    """Alarm topic, dashboard, alarms, step-line metric filters (and the log group they read, where the stack
    creates it), budget and Capacity Block rule of the blueprint's training stack; [] without training."""
    training = config.training
    if training is None:
        return []
    design = observability_design(config)
    rows = [
        OperationsResource(STACK, "AWS::SNS::Topic", "SNS topic", "alarm topic, KMS project key, TLS-only publish"),
        OperationsResource(
            STACK,
            "AWS::SNS::TopicPolicy",
            "SNS topic policy",
            "CloudWatch alarms"
            + (", AWS Budgets" if config.budget else "")
            + (", EventBridge" if capacity_block_reservations(training) else "")
            + " of this account may publish",
        ),
    ]
    if training.alarm_emails:
        rows.append(
            OperationsResource(
                STACK, "AWS::SNS::Subscription", "SNS subscription", "e-mail (confirm it)", len(training.alarm_emails)
            )
        )
    rows.append(OperationsResource(STACK, "AWS::CloudWatch::Dashboard", "CloudWatch dashboard", design.dashboard_name))
    rows.append(
        OperationsResource(
            STACK,
            "AWS::CloudWatch::Alarm",
            "CloudWatch alarm",
            ", ".join(a.construct_id for a in design.alarms),
            len(design.alarms),
        )
    )
    if design.composite_alarms:
        rows.append(
            OperationsResource(
                STACK,
                "AWS::CloudWatch::CompositeAlarm",
                "CloudWatch composite alarm",
                ", ".join(f"{a.construct_id} (all of {', '.join(a.all_of)})" for a in design.composite_alarms),
                len(design.composite_alarms),
            )
        )
    if design.step_log is not None:
        where = design.step_log.log_group_name or "the job log group"
        rows.append(
            OperationsResource(
                STACK,
                "AWS::Logs::MetricFilter",
                "Metric filter",
                f"step lines in {where} -> {design.step_log.namespace}: "
                + ", ".join(m.name for m in design.step_metrics),
                len(design.step_metrics),
            )
        )
        if design.step_log.create and design.step_log.log_group_name is not None:
            # Fluent Bit may create the group first: a custom resource creates it or takes it over (key,
            # retention), and keeps it on delete (`SharedLogGroup`).
            name = design.step_log.log_group_name
            rows += [
                OperationsResource(
                    STACK,
                    "Custom::SharedLogGroup",
                    "Log group",
                    f"{name} (Fluent Bit's container logs), created or taken over: "
                    f"{training.cluster.log_retention_days} days, KMS; kept on delete",
                ),
                OperationsResource(STACK, "AWS::Lambda::Function", "Lambda function", f"makes {name} ready"),
                OperationsResource(STACK, "AWS::IAM::Role", "IAM role", "its handler (this one log group)"),
                OperationsResource(STACK, "AWS::IAM::Policy", "IAM policy", "its handler's calls"),
                OperationsResource(STACK, "AWS::Logs::LogGroup", "Log group", "its handler, 365 days, KMS"),
            ]
    agent = design.host_agent
    if agent is not None:
        rows += [
            OperationsResource(
                STACK,
                "AWS::Logs::LogGroup",
                "Log group",
                f"{agent.kernel_log_group_name} (the GPU hosts' kernel log, CloudWatch agent): "
                f"{training.cluster.log_retention_days} days, KMS",
            ),
            OperationsResource(
                STACK,
                "AWS::Logs::MetricFilter",
                "Metric filter",
                f"NVIDIA Xid lines in {agent.kernel_log_group_name} -> {agent.namespace}: {agent.xid_metric}",
            ),
        ]
    budget = budget_design(config)
    if budget is not None:
        notes = [f"{p}%" for p in budget.thresholds_percent]
        if budget.forecast_percent is not None:
            notes.append(f"forecast {budget.forecast_percent}%")
        if budget.scale_to_zero_at_percent is not None:
            notes.append(
                f"{budget.scale_to_zero_at_percent}% -> BudgetScaleToZero"
                + (" and the alarm e-mails" if training.alarm_emails else "")
            )
            rows += [
                OperationsResource(STACK, "AWS::SNS::Topic", "SNS topic", "BudgetActionTopic, KMS project key"),
                OperationsResource(STACK, "AWS::SNS::TopicPolicy", "SNS topic policy", "AWS Budgets may publish"),
                OperationsResource(
                    STACK, "AWS::SNS::Subscription", "SNS subscription", "BudgetScaleToZero on BudgetActionTopic"
                ),
                *_function_rows(
                    "BudgetScaleToZero",
                    _what(training.engine, "accelerated node groups", bool(scale_to_zero_pools(config))),
                    "the topic",
                ),
                *_pool_rows(config),
            ]
        rows.append(
            OperationsResource(
                STACK,
                "AWS::Budgets::Budget",
                "Budget",
                f"${budget.monthly_usd:,.0f}/month on tag {budget.tag_key}={budget.tag_value}; notifies at "
                + ", ".join(notes),
            )
        )
    blocks = capacity_block_reservations(training)
    if blocks:
        rows.append(
            OperationsResource(
                STACK,
                "AWS::Events::Rule",
                "EventBridge rule",
                f"Capacity Block expiration warning of {', '.join(blocks)} -> alarm topic and ScaleToZero",
            )
        )
        rows += _function_rows("ScaleToZero", _what(training.engine, "node groups on the block"), "the rule")
    return rows


def _pool_rows(config: BlueprintConfig) -> list[OperationsResource]:
    """With Karpenter pools: BudgetScaleToZero's way into the cluster (`ScaleToZero` with pools)."""
    pools = scale_to_zero_pools(config)
    if not pools:
        return []
    names = ", ".join(p.name for p in pools)
    return [
        OperationsResource(
            STACK, "AWS::EC2::SecurityGroup", "Security group", "BudgetScaleToZero in the VPC: HTTPS out only"
        ),
        OperationsResource(
            STACK,
            "AWS::EC2::SecurityGroupIngress",
            "Security group rule",
            "BudgetScaleToZero -> EKS API endpoint on 443 (the control-plane group)",
            1,
        ),
        OperationsResource(
            STACK,
            "AWS::EKS::AccessEntry",
            "EKS access entry",
            "BudgetScaleToZero's role -> Kubernetes group mlstack:budget-scale-to-zero (no access policy)",
        ),
        OperationsResource(
            STACK,
            "Custom::AWSCDK-EKS-KubernetesResource",
            "Kubernetes manifest",
            f"ClusterRole + binding: get/patch NodePools {names}, list/delete NodeClaims",
        ),
    ]


def _what(engine: str, groups: str, pools: bool = False) -> str:
    if engine.startswith("hyperpod"):
        return "accelerated HyperPod instance groups -> 0 (UpdateCluster)" + (
            "; NodePool limits -> 0, NodeClaims deleted" if pools else ""
        )
    if pools:
        return "NodePool limits -> 0, their NodeClaims deleted (Kubernetes API, in the VPC)"
    return f"{groups} -> 0" if engine == "eks" else "the queue's jobs terminated, its compute environment disabled"


def _function_rows(name: str, what: str, invoker: str) -> list[OperationsResource]:
    """The resources of one `ScaleToZero` construct."""
    return [
        OperationsResource(STACK, "AWS::Lambda::Function", "Lambda function", f"{name}: {what}"),
        OperationsResource(STACK, "AWS::Lambda::Permission", "Lambda permission", f"{invoker} invokes {name}"),
        OperationsResource(STACK, "AWS::IAM::Role", "IAM role", f"{name} (least privilege)"),
        OperationsResource(STACK, "AWS::IAM::Policy", "IAM policy", f"{name}'s calls"),
        OperationsResource(STACK, "AWS::Logs::LogGroup", "Log group", f"{name}, 365 days, KMS"),
        OperationsResource(
            STACK, "AWS::CloudWatch::Alarm", "CloudWatch alarm", f"{name} failed (Errors >= 1 in 5 min) -> alarm topic"
        ),
    ]
