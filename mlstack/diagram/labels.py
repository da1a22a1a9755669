"""What one resource looks like in a diagram: its node kind and the label lines read from its properties.

`describe` dispatches on the CloudFormation type; an unknown type gets a generic node (type name plus any
instance type / count / capacity it declares), so new stacks need no change here to be drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlstack.diagram.cfn import App, Key, json_of, short_name
from mlstack.diagram.described import Described, cfn_text, generic, props_of, span, tag_of
from mlstack.diagram.labels_sagemaker import SAGEMAKER

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


def _subnet(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    name = tag_of(p, "aws-cdk:subnet-name") or "Subnet"
    zone = str(p.get("AvailabilityZoneId") or p.get("AvailabilityZone") or "?")
    return Described("subnet", [f"{name} {cfn_text(p.get('CidrBlock'))}"], role="subnet", zone=zone)


def _vpc(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("vpc", [f"VPC {cfn_text(props_of(r).get('CidrBlock'))}"], role="vpc")


def _vpc_endpoint(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    kind = str(p.get("VpcEndpointType", "Gateway"))
    name = cfn_text(p.get("ServiceName"))
    service = ".".join(name.split(".")[3:]) if name.startswith("com.amazonaws.") else name
    return Described("endpoints", [f"{kind} endpoints", service], group=f"vpce-{kind}")


def _nat(app: App, key: Key, r: dict[str, Any]) -> Described:
    igws = [k for k, _ in app.of_type("AWS::EC2::InternetGateway") if k[0] == key[0]]
    return Described("network", ["NAT gateway"], links=igws[:1])


def _node_group(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    labels = p.get("Labels") or {}
    name = labels.get("mlstack.io/node-group") if isinstance(labels, dict) else None
    types = [str(t) for t in p.get("InstanceTypes", [])]
    nics: list[Any] = []
    placement = False
    for template_key in app.refs(key[0], p.get("LaunchTemplate")):
        data = props_of(app.resources[template_key]).get("LaunchTemplateData", {})
        if "InstanceType" in data:
            types.append(cfn_text(data["InstanceType"]))
        nics = data.get("NetworkInterfaces", []) or []
        placement = bool(data.get("Placement"))
    s = p.get("ScalingConfig", {})
    lines = [f"node group {name or key[1]}", ", ".join(types) or "instance type: launch template"]
    lines.append(f"{s.get('DesiredSize', '?')} nodes ({span(s.get('MinSize'), s.get('MaxSize'))})")
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
        fallback = generic(app, key, r)
        return Described(fallback.kind, [], fold_into=referrers[0]) if referrers else fallback

    return describe_folded


def _eks_cluster(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    vpc = p.get("ResourcesVpcConfig", {})
    access = "private" if vpc.get("EndpointPrivateAccess") and not vpc.get("EndpointPublicAccess") else "public"
    return Described("cluster", ["EKS cluster", f"Kubernetes {p.get('Version', '?')}", f"API endpoint: {access}"])


def _addon(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("k8s", ["EKS add-ons", str(props_of(r).get("AddonName"))], group="addons")


def _helm(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    version = f" {p['Version']}" if "Version" in p else ""
    return Described("k8s", ["Helm charts", f"{p.get('Chart')}{version}"], group="helm")


def _manifest(app: App, key: Key, r: dict[str, Any]) -> Described:
    docs = json_of(props_of(r).get("Manifest"))
    items = [
        f"{d.get('kind')} {d.get('metadata', {}).get('name', '')}".strip() for d in docs or [] if isinstance(d, dict)
    ]
    return Described("k8s", ["Kubernetes manifests", *items], group="manifests")


def _fsx(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
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
    p = props_of(r)
    rules = p.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [{}])
    algorithm = rules[0].get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "")
    lines = [f"S3 {short_name(key[1])}", "KMS" if algorithm == "aws:kms" else "SSE-S3"]
    return Described("storage", lines)


def _alarm(app: App, key: Key, r: dict[str, Any]) -> Described:
    p = props_of(r)
    # A metric-math alarm names its metrics inside `Metrics`: the diagram lists them, not just "metric math".
    used = [m["MetricStat"]["Metric"].get("MetricName") for m in p.get("Metrics", []) if "MetricStat" in m]
    name = p.get("MetricName") or " / ".join(str(u) for u in used if u) or "metric math"
    return Described("ops", ["CloudWatch alarms", str(name)], group="alarms")


def _budget(app: App, key: Key, r: dict[str, Any]) -> Described:
    budget = props_of(r).get("Budget", {})
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
        "entry", [f"Lambda {short_name(key[1]).removesuffix('Function')}", str(props_of(r).get("Runtime", ""))]
    )


def _function_url(app: App, key: Key, r: dict[str, Any]) -> Described:
    return Described("entry", ["function URL", f"auth {props_of(r).get('AuthType')}"])


_DESCRIBE: dict[str, Callable[[App, Key, dict[str, Any]], Described]] = {
    "AWS::EC2::VPC": _vpc,
    "AWS::EC2::Subnet": _subnet,
    "AWS::EC2::VPCEndpoint": _vpc_endpoint,
    "AWS::EC2::NatGateway": _nat,
    "AWS::EC2::InternetGateway": lambda a, k, r: Described("network", ["Internet gateway"]),
    "AWS::EC2::FlowLog": lambda a, k, r: Described("ops", [f"flow logs ({props_of(r).get('TrafficType')})"]),
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
        "security", ["KMS key", "rotation on" if props_of(r).get("EnableKeyRotation") else "rotation off"]
    ),
    "AWS::SNS::Topic": lambda a, k, r: Described("messaging", ["SNS topics", short_name(k[1])], group="topics"),
    "AWS::CloudWatch::Alarm": _alarm,
    "AWS::CloudWatch::CompositeAlarm": lambda a, k, r: Described(
        "ops", ["CloudWatch alarms", f"composite {short_name(k[1])}"], group="alarms"
    ),
    "AWS::CloudWatch::Dashboard": lambda a, k, r: Described(
        "ops", ["CloudWatch dashboard", str(props_of(r).get("DashboardName", short_name(k[1])))]
    ),
    "AWS::Logs::MetricFilter": lambda a, k, r: Described(
        "ops",
        ["Log metric filters", *[str(t.get("MetricName")) for t in props_of(r).get("MetricTransformations", [])]],
        group="metric_filters",
    ),
    "AWS::Budgets::Budget": _budget,
    "AWS::Lambda::Function": _function,
    "AWS::Lambda::Url": _function_url,
    "AWS::StepFunctions::StateMachine": lambda a, k, r: (
        Described("other", ["CDK custom-resource providers", "Step Functions waiter"], group="providers")
        if k in a.providers
        else generic(a, k, r)
    ),
    **SAGEMAKER,
}


def describe(app: App, key: Key, resource: dict[str, Any]) -> Described:
    handler = _DESCRIBE.get(str(resource.get("Type")), generic)
    return handler(app, key, resource)
