"""The Karpenter controller's IAM policy: the one Karpenter documents for v1.14 (getting-started CloudFormation
template, policies NodeLifecycle, IAMIntegration, EKSIntegration, Interruption, ResourceDiscovery; zonal shift left
out: this cluster does not use ARC zonal shift), scoped to this cluster, its node role and its queue, plus the grants
EC2 needs on the volume key when Karpenter launches a node with a customer-managed-key root volume.

The tag conditions rely on the tags Karpenter puts on everything it creates (`kubernetes.io/cluster/<name>: owned`,
`eks:eks-cluster-name`, `karpenter.sh/nodepool`, `karpenter.k8s.aws/ec2nodeclass`).
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam


def _arn(service: str, resource: str, *, account: str = "*") -> str:
    return f"arn:{Aws.PARTITION}:{service}:{Aws.REGION}:{account}:{resource}"


def controller_statements(
    *, cluster_name: str, node_role_arn: str, queue_arn: str, volume_key_arn: str
) -> list[iam.PolicyStatement]:
    owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    resource_owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    created = [
        _arn("ec2", f"{kind}/*")
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    ]
    profile = f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:instance-profile/*"
    region = {"aws:RequestTag/topology.kubernetes.io/region": Aws.REGION}
    return [
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[
                f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::image/*",
                f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::snapshot/*",
                _arn("ec2", "security-group/*"),
                _arn("ec2", "subnet/*"),
                _arn("ec2", "capacity-reservation/*"),
                _arn("ec2", "placement-group/*"),
            ],
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2LaunchTemplateAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[_arn("ec2", "launch-template/*")],
            conditions={"StringEquals": resource_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceActionsWithTags",
            actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            resources=created,
            conditions={"StringEquals": owned, "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceCreationTagging",
            actions=["ec2:CreateTags"],
            resources=created,
            conditions={
                "StringEquals": {**owned, "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceTagging",
            actions=["ec2:CreateTags"],
            resources=[_arn("ec2", "instance/*")],
            conditions={
                "StringEquals": resource_owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedDeletion",
            actions=["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            resources=[_arn("ec2", "instance/*"), _arn("ec2", "launch-template/*")],
            conditions={"StringEquals": resource_owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowPassingInstanceRole",
            actions=["iam:PassRole"],
            resources=[node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileCreationActions",
            actions=["iam:CreateInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {**owned, **region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileTagActions",
            actions=["iam:TagInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {
                    **resource_owned,
                    "aws:ResourceTag/topology.kubernetes.io/region": Aws.REGION,
                    **owned,
                    **region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileActions",
            actions=["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {**resource_owned, "aws:ResourceTag/topology.kubernetes.io/region": Aws.REGION},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowAPIServerEndpointDiscovery",
            actions=["eks:DescribeCluster"],
            resources=[_arn("eks", f"cluster/{cluster_name}", account=Aws.ACCOUNT_ID)],
        ),
        iam.PolicyStatement(
            sid="AllowInterruptionQueueActions",
            actions=["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            resources=[queue_arn],
        ),
        iam.PolicyStatement(
            sid="AllowRegionalReadActions",
            actions=[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": Aws.REGION}},
        ),
        iam.PolicyStatement(
            sid="AllowSSMReadActions",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/*"],
        ),
        iam.PolicyStatement(sid="AllowPricingReadActions", actions=["pricing:GetProducts"], resources=["*"]),
        iam.PolicyStatement(
            sid="AllowUnscopedInstanceProfileListAction", actions=["iam:ListInstanceProfiles"], resources=["*"]
        ),
        iam.PolicyStatement(
            sid="AllowInstanceProfileReadActions", actions=["iam:GetInstanceProfile"], resources=[profile]
        ),
        # A node's root volume is encrypted with the project key: EC2 creates it with the caller's permissions, so the
        # caller of CreateFleet needs these on the key, through EC2 only (EBS User Guide, "Amazon EBS encryption":
        # "Permissions for IAM users"; KMS kms:ViaService).
        iam.PolicyStatement(
            sid="AllowVolumeKeyThroughEc2",
            actions=[
                "kms:CreateGrant",
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncryptFrom",
                "kms:ReEncryptTo",
            ],
            resources=[volume_key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"ec2.{Aws.REGION}.amazonaws.com"}},
        ),
    ]
