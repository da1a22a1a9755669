"""The resources of one construct (or of one CDK helper a construct calls), as CloudFormation type counts.

Each function mirrors the construct named in its docstring: change both together (the footprint test fails on a
blueprint whose templates differ). CDK-internal resources count too: custom-resource providers, log groups the
constructs give them, the kubectl handler, bucket policies (`enforceSSL`), topic policies.
"""

from __future__ import annotations

from collections import Counter

Footprint = Counter[str]

BUCKET = "AWS::S3::Bucket"
BUCKET_POLICY = "AWS::S3::BucketPolicy"
ROLE = "AWS::IAM::Role"
POLICY = "AWS::IAM::Policy"
FUNCTION = "AWS::Lambda::Function"
LAYER = "AWS::Lambda::LayerVersion"
LOG_GROUP = "AWS::Logs::LogGroup"
SECURITY_GROUP = "AWS::EC2::SecurityGroup"
INGRESS = "AWS::EC2::SecurityGroupIngress"
EGRESS = "AWS::EC2::SecurityGroupEgress"
TOPIC = "AWS::SNS::Topic"
TOPIC_POLICY = "AWS::SNS::TopicPolicy"
SUBSCRIPTION = "AWS::SNS::Subscription"
ALARM = "AWS::CloudWatch::Alarm"
QUEUE = "AWS::SQS::Queue"
QUEUE_POLICY = "AWS::SQS::QueuePolicy"
RULE = "AWS::Events::Rule"
PERMISSION = "AWS::Lambda::Permission"
LAUNCH_TEMPLATE = "AWS::EC2::LaunchTemplate"
PLACEMENT_GROUP = "AWS::EC2::PlacementGroup"
ACCESS_ENTRY = "AWS::EKS::AccessEntry"
POD_IDENTITY = "AWS::EKS::PodIdentityAssociation"
KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"

FSX_PORTS = 2
"""Lustre's ports, each its own rule: 988 and 1018-1023 (`FsxLustre`, FSx for Lustre User Guide, "File system
access control with Amazon VPC")."""


def bucket() -> Footprint:
    """An `s3.Bucket` with `enforce_ssl` (the stacks' `kms_bucket` and `access_log_bucket`)."""
    return Counter({BUCKET: 1, BUCKET_POLICY: 1})


def topic(emails: int = 0) -> Footprint:
    """An encrypted `sns.Topic` with `enforce_ssl` (or a resource policy) and one email subscription each."""
    found = Counter({TOPIC: 1, TOPIC_POLICY: 1})
    if emails:
        found[SUBSCRIPTION] = emails
    return found


def role(*, policy: bool = True) -> Footprint:
    """An `iam.Role`; with `policy`, its default policy (the grants added to it)."""
    return Counter({ROLE: 1, POLICY: 1} if policy else {ROLE: 1})


def function(*, policy: bool = True) -> Footprint:
    """A Lambda function with its own role (and default policy) and its own encrypted log group."""
    return Counter({FUNCTION: 1, LOG_GROUP: 1}) + role(policy=policy)


def provider_framework() -> Footprint:
    """`custom_resources.Provider`'s framework onEvent function: function, role, policy, log group."""
    return function()


def bucket_deployment() -> Footprint:
    """An `s3_deployment.BucketDeployment`: its custom resource, the singleton handler (role and policy), the
    AWS CLI layer and the log group the construct gives it."""
    return Counter({"Custom::CDKBucketDeployment": 1, LAYER: 1}) + function()


def closed_group(*, self_referencing: bool) -> Footprint:
    """`security.groups.closed_security_group` (no egress but what is added); `self_referencing`: all traffic to
    and from itself (`allow_internally`: one ingress and one egress rule)."""
    found = Counter({SECURITY_GROUP: 1})
    if self_referencing:
        found += Counter({INGRESS: 1, EGRESS: 1})
    return found


def efa_networking(*, placement_group: bool) -> Footprint:
    """`EfaNetworking`: its closed, self-referencing security group and, when asked, a cluster placement group."""
    found = closed_group(self_referencing=True)
    if placement_group:
        found[PLACEMENT_GROUP] += 1
    return found


def fsx_lustre(*, closed_clients: int, open_clients: int, data_repository: bool) -> Footprint:
    """`FsxLustre`: the file system, its security group (closed), and the Lustre ports both ways between it and
    itself and between it and each client group. A closed client (no default egress) gets its egress rules; an
    open one needs none."""
    clients = closed_clients + open_clients
    found = Counter(
        {
            "AWS::FSx::FileSystem": 1,
            SECURITY_GROUP: 1,
            # The group to itself, and to and from each client: one rule per port and direction.
            INGRESS: FSX_PORTS * (1 + 2 * clients),
            EGRESS: FSX_PORTS * (1 + clients + closed_clients),
        }
    )
    if data_repository:
        found["AWS::FSx::DataRepositoryAssociation"] = 1
    return found
