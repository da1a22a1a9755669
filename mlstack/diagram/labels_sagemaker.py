"""Diagram nodes of the SageMaker resources: models, endpoints and their variants, scaling, pipelines and their
steps, HyperPod clusters and their task governance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlstack.diagram.cfn import App, Key, json_of, short_name
from mlstack.diagram.described import Child, Described, cfn_text, generic, props_of, span


def _model(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    containers = [p["PrimaryContainer"]] if "PrimaryContainer" in p else p.get("Containers", [])
    lines = [f"SageMaker model {short_name(key[1]).removesuffix('Model')}"]
    lines += [cfn_text(c.get("Image")).rsplit("/", 1)[-1] for c in containers]
    if p.get("EnableNetworkIsolation"):
        lines.append("network isolation")
    return Described("ml", lines)


def _variant_lines(v: dict[str, Any], weighted: bool) -> list[str]:
    lines = [f"variant {v.get('VariantName', '?')}"]
    if "ServerlessConfig" in v:
        s = v["ServerlessConfig"]
        lines.append(f"serverless {s.get('MemorySizeInMB')} MB, {s.get('MaxConcurrency')} concurrent")
        if s.get("ProvisionedConcurrency"):
            lines.append(f"{s['ProvisionedConcurrency']} provisioned")
    else:
        lines.append(f"{v.get('InstanceType', '?')} x {v.get('InitialInstanceCount', '?')}")
    if weighted and "InitialVariantWeight" in v:
        lines.append(f"weight {v['InitialVariantWeight']}")
    return lines


def _endpoint(app: App, key: Key, r: dict[str, Any]) -> Described:
    lines = [f"SageMaker endpoint {short_name(key[1]).removesuffix('Endpoint')}"]
    children = []
    for config_key in app.refs(key[0], props_of(r).get("EndpointConfigName")):
        config = props_of(app.resources[config_key])
        if "AsyncInferenceConfig" in config:
            lines.append("asynchronous (S3 in, S3 + SNS out)")
        if "DataCaptureConfig" in config:
            lines.append(f"data capture {config['DataCaptureConfig'].get('InitialSamplingPercentage', '?')}%")
        variants = config.get("ProductionVariants", []) + config.get("ShadowProductionVariants", [])
        for index, variant in enumerate(variants):
            children.append(Child(f"v{index}", "ml", _variant_lines(variant, len(variants) > 1), refs_from=variant))
    return Described("ml", lines, children=children)


def _endpoint_config(app: App, key: Key, r: dict[str, Any]) -> Described:
    referrers = app.referrers.get(key, [])
    return Described("ml", [], fold_into=referrers[0]) if referrers else generic(app, key, r)


def _scalable_target(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    resource = cfn_text(p.get("ResourceId")).rsplit("/", 1)[-1]
    return Described(
        "ops", [f"auto scaling {resource}", f"{span(p.get('MinCapacity'), p.get('MaxCapacity'))} instances"]
    )


def _scaling_policy(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    targets = app.refs(key[0], p.get("ScalingTargetId"))
    tracking = p.get("TargetTrackingScalingPolicyConfiguration")
    if tracking:
        metric = tracking.get("PredefinedMetricSpecification", {}).get("PredefinedMetricType") or tracking.get(
            "CustomizedMetricSpecification", {}
        ).get("MetricName")
        line = f"target {metric} = {tracking.get('TargetValue')}"
    else:
        line = "step scaling"
    return Described("ops", [line], fold_into=targets[0] if targets else None)


def _pipeline(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    body = json_of(p.get("PipelineDefinition", {}).get("PipelineDefinitionBody"))
    lines = [f"SageMaker pipeline {cfn_text(p.get('PipelineName'))}"]
    children: list[Child] = []
    steps = _flatten_steps((body or {}).get("Steps", []))
    names = {s.get("Name") for s in steps}
    for step in steps:
        args = step.get("Arguments", {}) if isinstance(step.get("Arguments"), dict) else {}
        text = str(args)
        after = sorted({d for d in step.get("DependsOn", []) if d in names})
        after += sorted({n for n in names if n != step.get("Name") and f"Steps.{n}." in text} - set(after))
        after += [c for c in (step.get("_parent"),) if c]
        step_lines = [str(step.get("Name")), str(step.get("Type"))]
        resources = args.get("ResourceConfig") or args.get("ProcessingResources", {}).get("ClusterConfig") or {}
        if "InstanceType" in resources:
            step_lines.append(f"{cfn_text(resources['InstanceType'])} x {cfn_text(resources.get('InstanceCount', 1))}")
        children.append(Child(str(step.get("Name")), "step", step_lines, after=after))
    return Described("ml", lines, children=children)


def _flatten_steps(steps: list[Any], parent: str | None = None) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for step in steps:
        if not isinstance(step, dict):
            continue
        flat.append({**step, "_parent": parent})
        args = step.get("Arguments", {})
        if step.get("Type") == "Condition" and isinstance(args, dict):
            flat += _flatten_steps(args.get("IfSteps", []) + args.get("ElseSteps", []), step.get("Name"))
    return flat


def _hyperpod(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    lines = ["SageMaker HyperPod cluster", "EKS orchestrator" if p.get("Orchestrator", {}).get("Eks") else "Slurm"]
    if p.get("AutoScaling", {}).get("Mode") == "Enable":
        lines.append(f"autoscaling: {p['AutoScaling'].get('AutoScalerType')}, {p.get('NodeProvisioningMode')}")
    children = [
        Child(
            f"g{index}",
            "compute",
            [
                f"instance group {g.get('InstanceGroupName')}",
                f"{cfn_text(g.get('InstanceType'))} x {cfn_text(g.get('InstanceCount'))}",
            ],
        )
        for index, g in enumerate(p.get("InstanceGroups", []))
    ]
    return Described("cluster", lines, children=children)


def _compute_quota(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    resources = p.get("ComputeQuotaConfig", {}).get("ComputeQuotaResources", [])
    quota = ", ".join(f"{cfn_text(q.get('Accelerators'))} x {cfn_text(q.get('InstanceType'))}" for q in resources)
    return Described(
        "k8s",
        ["HyperPod task governance", f"team {cfn_text(p.get('ComputeQuotaTarget', {}).get('TeamName'))}: {quota}"],
        group="governance",
    )


def _scheduler_config(app: App, key: Key, r: dict[str, Any]) -> Described:
    classes = props_of(r).get("SchedulerConfig", {}).get("PriorityClasses", [])
    order = " > ".join(f"{cfn_text(c.get('Name'))} {cfn_text(c.get('Weight'))}" for c in classes)
    return Described("k8s", ["HyperPod task governance", f"cluster policy: {order}"], group="governance")


SAGEMAKER: dict[str, Callable[[App, Key, dict[str, Any]], Described]] = {
    "AWS::SageMaker::Model": _model,
    "AWS::SageMaker::EndpointConfig": _endpoint_config,
    "AWS::SageMaker::Endpoint": _endpoint,
    "AWS::SageMaker::Pipeline": _pipeline,
    "AWS::SageMaker::Cluster": _hyperpod,
    "AWS::SageMaker::ComputeQuota": _compute_quota,
    "AWS::SageMaker::ClusterSchedulerConfig": _scheduler_config,
    "AWS::ApplicationAutoScaling::ScalableTarget": _scalable_target,
    "AWS::ApplicationAutoScaling::ScalingPolicy": _scaling_policy,
}
