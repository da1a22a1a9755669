"""The Karpenter controller's calls when it launches and drains a node of a pool (one part of
`mlstack.access.calls`'s table)."""

from __future__ import annotations

from mlstack.access.callspec import CallSpec

# Karpenter controller: launching and draining a node of a pool (facts: mlstack.access.karpenter).
_K_EC2 = "arn:aws:ec2:{region}:{account}"
_K_TAGS = {
    "aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
    "aws:RequestTag/eks:eks-cluster-name": "{cluster_name}",
    "aws:RequestTag/karpenter.sh/nodepool": "{pool}",
}
_K_OWNED = {
    "aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned",
    "aws:ResourceTag/karpenter.sh/nodepool": "{pool}",
}
_K_PROFILE = "arn:aws:iam::{account}:instance-profile/{cluster_name}_1234567890"
_K_PROFILE_K_TAGS = {
    "aws:RequestTag/topology.kubernetes.io/region": "{region}",
    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "{pool}",
}
_K_PROFILE_K_OWNED = {
    "aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned",
    "aws:ResourceTag/topology.kubernetes.io/region": "{region}",
    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "{pool}",
}
_K_REGION = {"aws:RequestedRegion": "{region}"}
_K_EBS = {"kms:ViaService": "ec2.{region}.amazonaws.com"}


def _k(action: str, resource: str, context: dict[str, str] | None = None, source: str = "karpenter") -> CallSpec:
    return CallSpec(action, resource, source, "pools", tuple((context or {}).items()))


KARPENTER_CALLS: list[CallSpec] = [
    _k("eks:DescribeCluster", "{cluster}"),
    # (ssm:GetParameter of the public AMI parameter is not simulated: its ARN has no account, which the simulator's
    # resource parser refuses; the policy allows arn:...:ssm:<region>::parameter/aws/service/*.)
    _k("ec2:DescribeInstanceTypes", "*", _K_REGION),
    _k("ec2:DescribeSubnets", "*", _K_REGION),
    _k("ec2:DescribeSecurityGroups", "*", _K_REGION),
    _k("ec2:DescribeImages", "*", _K_REGION),
    _k("ec2:DescribePlacementGroups", "*", _K_REGION),
    _k("ec2:DescribeCapacityReservations", "*", _K_REGION),
    _k("pricing:GetProducts", "*"),
    _k("iam:ListInstanceProfiles", "*"),
    _k("iam:CreateInstanceProfile", _K_PROFILE, {**_K_TAGS, **_K_PROFILE_K_TAGS}),
    _k("iam:TagInstanceProfile", _K_PROFILE, {**_K_PROFILE_K_OWNED, **_K_TAGS, **_K_PROFILE_K_TAGS}),
    _k("iam:AddRoleToInstanceProfile", _K_PROFILE, _K_PROFILE_K_OWNED),
    _k("iam:GetInstanceProfile", _K_PROFILE),
    _k("iam:PassRole", "{node_role}", {"iam:PassedToService": "ec2.amazonaws.com"}),
    _k("ec2:CreateLaunchTemplate", f"{_K_EC2}:launch-template/*", _K_TAGS),
    _k("ec2:CreateTags", f"{_K_EC2}:launch-template/*", {**_K_TAGS, "ec2:CreateAction": "CreateLaunchTemplate"}),
    _k("ec2:CreateFleet", f"{_K_EC2}:fleet/*", _K_TAGS),
    _k("ec2:CreateFleet", f"{_K_EC2}:launch-template/lt-0123456789abcdef0", _K_OWNED),
    _k("ec2:CreateFleet", "{subnet}"),
    _k("ec2:CreateFleet", "arn:aws:ec2:{region}::image/ami-0123456789abcdef0"),
    _k("ec2:RunInstances", "arn:aws:ec2:{region}::image/ami-0123456789abcdef0"),
    _k("ec2:RunInstances", "{subnet}"),
    _k("ec2:RunInstances", f"{_K_EC2}:security-group/sg-0123456789abcdef0"),
    _k("ec2:RunInstances", f"{_K_EC2}:launch-template/lt-0123456789abcdef0", _K_OWNED),
    _k("ec2:RunInstances", f"{_K_EC2}:instance/*", _K_TAGS),
    _k("ec2:RunInstances", f"{_K_EC2}:volume/*", _K_TAGS),
    _k("ec2:RunInstances", f"{_K_EC2}:network-interface/*", _K_TAGS),
    _k("ec2:CreateTags", f"{_K_EC2}:instance/*", {**_K_TAGS, "ec2:CreateAction": "CreateFleet"}),
    _k("kms:CreateGrant", "{key}", _K_EBS, "ebs-kms"),
    _k("kms:GenerateDataKeyWithoutPlaintext", "{key}", _K_EBS, "ebs-kms"),
    _k("kms:Decrypt", "{key}", _K_EBS, "ebs-kms"),
    _k("kms:DescribeKey", "{key}", _K_EBS, "ebs-kms"),
    _k("sqs:ReceiveMessage", "{queue}"),
    _k("sqs:DeleteMessage", "{queue}"),
    _k("ec2:TerminateInstances", f"{_K_EC2}:instance/i-0123456789abcdef0", _K_OWNED),
]
"""Every call follows the controller policy Karpenter documents (v1.14 getting started, controller policy) and the
EBS User Guide ("Amazon EBS encryption", permissions of a caller that launches with a customer managed key)."""
