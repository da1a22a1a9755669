"""What one resource looks like in a diagram: its node kind and the label lines read from its properties.

`describe` dispatches on the CloudFormation type; an unknown type gets a generic node (type name plus any
instance type / count / capacity it declares), so new stacks need no change here to be drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlstack.diagram.cfn import App, Key, json_of, short_name, text_of

HIDDEN_TYPES = frozenset(
    {
        "AWS::CDK::Metadata",
        "AWS::EC2::EIP",
        "AWS::EC2::Route",
        "AWS::EC2::RouteTable",
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::EC2::SecurityGroupIngress",
        "AWS::EC2::SubnetRouteTableAssociation",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EKS::AccessEntry",
        "AWS::EKS::PodIdentityAssociation",
        "AWS::IAM::InstanceProfile",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::Policy",
        "AWS::IAM::Role",
        "AWS::KMS::Alias",
        "AWS::Lambda::LayerVersion",
        "AWS::Lambda::Permission",
        "AWS::Logs::LogGroup",
        "AWS::S3::BucketPolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::SSM::Parameter",
        "Custom::VpcRestrictDefaultSG",
    }
)
"""Plumbing: drawn as nothing (roles, routes, rules, policies, aliases, log groups, CDK's own parameters)."""

EDGE_TARGET_KINDS = frozenset({"storage", "ml", "cluster", "compute", "entry", "messaging", "network"})
"""A reference to a node of one of these kinds is drawn as a path (data, traffic, control)."""

GROUPED_LINE_WIDTH = 60


@dataclass
class Child:
    """A node drawn for a part of a resource (an endpoint variant, a pipeline step, an instance group)."""

    suffix: str
    kind: str
    lines: list[str]
    refs_from: Any = None
    """A property value whose references become paths from this child (a variant's model)."""
    after: list[str] = field(default_factory=list)
    """Suffixes of sibling children this one follows (pipeline step order); none: a path from the parent."""


@dataclass
class Described:
    kind: str
    lines: list[str]
    group: str | None = None
    """Resources of one stack with the same group share one node: title once, then one item each."""
    fold_into: Key | None = None
    """Drawn as part of that resource's node: its label lines are appended there."""
    children: list[Child] = field(default_factory=list)
    role: str = ""
    """`vpc` or `subnet`: drawn as a box that holds other nodes."""
    zone: str = ""
    links: list[Key] = field(default_factory=list)
    """Extra paths not visible as references (a NAT gateway's route to the internet gateway)."""
    loop: str | None = None
    """A self-loop with this label (all-to-all traffic inside an EFA node group)."""


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource.get("Properties", {})
    return props


def _tag(props: dict[str, Any], key: str) -> str | None:
    tags = props.get("Tags", [])
    if isinstance(tags, dict):
        return str(tags[key]) if key in tags else None
    return next((str(t["Value"]) for t in tags if isinstance(t, dict) and t.get("Key") == key), None)


def _range(low: Any, high: Any) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def _text(value: Any) -> str:
    return text_of(value) or "*"


def _subnet(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    name = _tag(p, "aws-cdk:subnet-name") or "Subnet"
    zone = str(p.get("AvailabilityZoneId") or p.get("AvailabilityZone") or "?")
    return Described("subnet", [f"{name} {_text(p.get('CidrBlock'))}"], role="subnet", zone=zone)


def _vpc(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("vpc", [f"VPC {_text(_props(r).get('CidrBlock'))}"], role="vpc")


def _vpc_endpoint(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    kind = str(p.get("VpcEndpointType", "Gateway"))
    name = _text(p.get("ServiceName"))
    service = ".".join(name.split(".")[3:]) if name.startswith("com.amazonaws.") else name
    return Described("endpoints", [f"{kind} endpoints", service], group=f"vpce-{kind}")


def _nat(app: App, key: Key, r: dict[str, Any]) -> Described:
    igws = [k for k, _ in app.of_type("AWS::EC2::InternetGateway") if k[0] == key[0]]
    return Described("network", ["NAT gateway"], links=igws[:1])


def _node_group(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    labels = p.get("Labels") or {}
    name = labels.get("mlstack.io/node-group") if isinstance(labels, dict) else None
    types = [str(t) for t in p.get("InstanceTypes", [])]
    nics: list[Any] = []
    placement = False
    for template_key in app.refs(key[0], p.get("LaunchTemplate")):
        data = _props(app.resources[template_key]).get("LaunchTemplateData", {})
        if "InstanceType" in data:
            types.append(_text(data["InstanceType"]))
        nics = data.get("NetworkInterfaces", []) or []
        placement = bool(data.get("Placement"))
    s = p.get("ScalingConfig", {})
    lines = [f"node group {name or key[1]}", ", ".join(types) or "instance type: launch template"]
    lines.append(f"{s.get('DesiredSize', '?')} nodes ({_range(s.get('MinSize'), s.get('MaxSize'))})")
    lines.append(str(p.get("CapacityType", "ON_DEMAND")).lower().replace("_", "-"))
    efa = sum(1 for n in nics if str(n.get("InterfaceType", "")).startswith("efa"))
    if efa:
        lines.append(f"EFA: {efa} interfaces per node")
    if placement:
        lines.append("cluster placement group")
    gbps = labels.get("mlstack.io/network-gbps") if isinstance(labels, dict) else None
    loop = (f"EFA {gbps} Gbps" if gbps else "EFA") if efa else None
    return Described("compute", lines, loop=loop)


def _fold_into_referrer(kind: str) -> Callable[[App, Key, dict[str, Any]], Described]:
    def describe_folded(app: App, key: Key, r: dict[str, Any]) -> Described:
        referrers = app.referrers.get(key, [])
        generic = _generic(app, key, r)
        return Described(generic.kind, [], fold_into=referrers[0]) if referrers else generic

    return describe_folded


def _eks_cluster(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    vpc = p.get("ResourcesVpcConfig", {})
    access = "private" if vpc.get("EndpointPrivateAccess") and not vpc.get("EndpointPublicAccess") else "public"
    return Described("cluster", ["EKS cluster", f"Kubernetes {p.get('Version', '?')}", f"API endpoint: {access}"])


def _addon(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("k8s", ["EKS add-ons", str(_props(r).get("AddonName"))], group="addons")


def _helm(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    version = f" {p['Version']}" if "Version" in p else ""
    return Described("k8s", ["Helm charts", f"{p.get('Chart')}{version}"], group="helm")


def _manifest(app: App, key: Key, r: dict[str, Any]) -> Described:
    docs = json_of(_props(r).get("Manifest"))
    items = [
        f"{d.get('kind')} {d.get('metadata', {}).get('name', '')}".strip() for d in docs or [] if isinstance(d, dict)
    ]
    return Described("k8s", ["Kubernetes manifests", *items], group="manifests")


def _fsx(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    fs_type = str(p.get("FileSystemType", ""))
    lustre = p.get("LustreConfiguration", {})
    lines = [f"FSx for {fs_type.title() if fs_type != 'ONTAP' else fs_type}"]
    lines.append(f"{lustre.get('DeploymentType', '')} {p.get('StorageCapacity', '?')} GiB".strip())
    if "PerUnitStorageThroughput" in lustre:
        lines.append(f"{lustre['PerUnitStorageThroughput']} MB/s/TiB")
    if lustre.get("DataRepositoryAssociations") or lustre.get("ImportPath"):
        lines.append("S3 data repository")
    return Described("storage", lines)


def _bucket(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    rules = p.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [{}])
    algorithm = rules[0].get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "")
    lines = [f"S3 {short_name(key[1])}", "KMS" if algorithm == "aws:kms" else "SSE-S3"]
    return Described("storage", lines)


def _model(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    containers = [p["PrimaryContainer"]] if "PrimaryContainer" in p else p.get("Containers", [])
    lines = [f"SageMaker model {short_name(key[1]).removesuffix('Model')}"]
    lines += [_text(c.get("Image")).rsplit("/", 1)[-1] for c in containers]
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
    for config_key in app.refs(key[0], _props(r).get("EndpointConfigName")):
        config = _props(app.resources[config_key])
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
    return Described("ml", [], fold_into=referrers[0]) if referrers else _generic(app, key, r)


def _scalable_target(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    resource = _text(p.get("ResourceId")).rsplit("/", 1)[-1]
    return Described(
        "ops", [f"auto scaling {resource}", f"{_range(p.get('MinCapacity'), p.get('MaxCapacity'))} instances"]
    )


def _scaling_policy(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
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


def _alarm(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    # A metric-math alarm names its metrics inside `Metrics`: the diagram lists them, not just "metric math".
    used = [m["MetricStat"]["Metric"].get("MetricName") for m in p.get("Metrics", []) if "MetricStat" in m]
    name = p.get("MetricName") or " / ".join(str(u) for u in used if u) or "metric math"
    return Described("ops", ["CloudWatch alarms", str(name)], group="alarms")


def _budget(app: App, key: Key, r: dict[str, Any]) -> Described:
    budget = _props(r).get("Budget", {})
    limit = budget.get("BudgetLimit", {})
    tags = budget.get("CostFilters", {}).get("TagKeyValue", [])
    lines = [
        "AWS Budgets",
        f"{limit.get('Amount')} {limit.get('Unit', 'USD')} {str(budget.get('TimeUnit', '')).lower()}",
    ]
    return Described("ops", lines + [f"tag {t.removeprefix('user:')}" for t in tags])


def _function(app: App, key: Key, r: dict[str, Any]) -> Described:
    if key in app.providers:
        return Described("other", ["CDK custom-resource providers", "Lambda"], group="providers")
    return Described(
        "entry", [f"Lambda {short_name(key[1]).removesuffix('Function')}", str(_props(r).get("Runtime", ""))]
    )


def _function_url(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("entry", ["function URL", f"auth {_props(r).get('AuthType')}"])


def _pipeline(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    body = json_of(p.get("PipelineDefinition", {}).get("PipelineDefinitionBody"))
    lines = [f"SageMaker pipeline {_text(p.get('PipelineName'))}"]
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
            step_lines.append(f"{_text(resources['InstanceType'])} x {_text(resources.get('InstanceCount', 1))}")
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
    p = _props(r)
    lines = ["SageMaker HyperPod cluster", "EKS orchestrator" if p.get("Orchestrator", {}).get("Eks") else "Slurm"]
    if p.get("AutoScaling", {}).get("Mode") == "Enable":
        lines.append(f"autoscaling: {p['AutoScaling'].get('AutoScalerType')}, {p.get('NodeProvisioningMode')}")
    children = [
        Child(
            f"g{index}",
            "compute",
            [
                f"instance group {g.get('InstanceGroupName')}",
                f"{_text(g.get('InstanceType'))} x {_text(g.get('InstanceCount'))}",
            ],
        )
        for index, g in enumerate(p.get("InstanceGroups", []))
    ]
    return Described("cluster", lines, children=children)


def _compute_quota(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = _props(r)
    resources = p.get("ComputeQuotaConfig", {}).get("ComputeQuotaResources", [])
    quota = ", ".join(f"{_text(q.get('Accelerators'))} x {_text(q.get('InstanceType'))}" for q in resources)
    return Described(
        "k8s",
        ["HyperPod task governance", f"team {_text(p.get('ComputeQuotaTarget', {}).get('TeamName'))}: {quota}"],
        group="governance",
    )


def _scheduler_config(app: App, key: Key, r: dict[str, Any]) -> Described:
    classes = _props(r).get("SchedulerConfig", {}).get("PriorityClasses", [])
    order = " > ".join(f"{_text(c.get('Name'))} {_text(c.get('Weight'))}" for c in classes)
    return Described("k8s", ["HyperPod task governance", f"cluster policy: {order}"], group="governance")


_INTERESTING = ("InstanceType", "InstanceTypes", "InstanceCount", "MinvCpus", "MaxvCpus", "Priority", "Engine")


def _generic(app: App, key: Key, r: dict[str, Any]) -> Described:
    kind = str(r.get("Type", "?"))
    service = kind.split("::")[1] if kind.count("::") == 2 else kind
    lines = [f"{kind.split('::')[-1]} {short_name(key[1])}", service if service != kind else ""]
    lines += _interesting(_props(r))
    category = {"Batch": "compute", "EC2": "compute", "EFS": "storage", "SQS": "messaging", "SNS": "messaging"}
    return Described(
        category.get(service, "ml" if service.startswith(("SageMaker", "Bedrock")) else "other"),
        [x for x in lines if x],
    )


def _interesting(value: Any, depth: int = 0) -> list[str]:
    found: list[str] = []
    if isinstance(value, dict) and depth < 3:
        for name, item in sorted(value.items()):
            if name in _INTERESTING and not isinstance(item, dict):
                shown = ", ".join(map(_text, item)) if isinstance(item, list) else _text(item)
                found.append(f"{name}: {shown}")
            else:
                found += _interesting(item, depth + 1)
    return found


_DESCRIBE: dict[str, Callable[[App, Key, dict[str, Any]], Described]] = {
    "AWS::EC2::VPC": _vpc,
    "AWS::EC2::Subnet": _subnet,
    "AWS::EC2::VPCEndpoint": _vpc_endpoint,
    "AWS::EC2::NatGateway": _nat,
    "AWS::EC2::InternetGateway": lambda a, k, r: Described("network", ["Internet gateway"]),
    "AWS::EC2::FlowLog": lambda a, k, r: Described("ops", [f"flow logs ({_props(r).get('TrafficType')})"]),
    "AWS::EC2::LaunchTemplate": _fold_into_referrer("compute"),
    "AWS::EC2::PlacementGroup": _fold_into_referrer("compute"),
    "AWS::EKS::Cluster": _eks_cluster,
    "AWS::EKS::Nodegroup": _node_group,
    "AWS::EKS::Addon": _addon,
    "Custom::AWSCDK-EKS-HelmChart": _helm,
    "Custom::AWSCDK-EKS-KubernetesResource": _manifest,
    "AWS::FSx::FileSystem": _fsx,
    "AWS::S3::Bucket": _bucket,
    "AWS::KMS::Key": lambda a, k, r: Described(
        "security", ["KMS key", "rotation on" if _props(r).get("EnableKeyRotation") else "rotation off"]
    ),
    "AWS::SNS::Topic": lambda a, k, r: Described("messaging", ["SNS topics", short_name(k[1])], group="topics"),
    "AWS::SageMaker::Model": _model,
    "AWS::SageMaker::EndpointConfig": _endpoint_config,
    "AWS::SageMaker::Endpoint": _endpoint,
    "AWS::SageMaker::Pipeline": _pipeline,
    "AWS::SageMaker::Cluster": _hyperpod,
    "AWS::SageMaker::ComputeQuota": _compute_quota,
    "AWS::SageMaker::ClusterSchedulerConfig": _scheduler_config,
    "AWS::ApplicationAutoScaling::ScalableTarget": _scalable_target,
    "AWS::ApplicationAutoScaling::ScalingPolicy": _scaling_policy,
    "AWS::CloudWatch::Alarm": _alarm,
    "AWS::CloudWatch::Dashboard": lambda a, k, r: Described(
        "ops", ["CloudWatch dashboard", str(_props(r).get("DashboardName", short_name(k[1])))]
    ),
    "AWS::Logs::MetricFilter": lambda a, k, r: Described(
        "ops",
        ["Log metric filters", *[str(t.get("MetricName")) for t in _props(r).get("MetricTransformations", [])]],
        group="metric_filters",
    ),
    "AWS::Budgets::Budget": _budget,
    "AWS::Lambda::Function": _function,
    "AWS::Lambda::Url": _function_url,
}


def describe(app: App, key: Key, resource: dict[str, Any]) -> Described:
    handler = _DESCRIBE.get(str(resource.get("Type")), _generic)
    return handler(app, key, resource)
