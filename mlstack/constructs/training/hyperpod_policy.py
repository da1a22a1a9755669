"""Execution-role statements of `HyperPodCluster` that depend on its options (EKS orchestrator, volume key)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3


def volume_key_statements(volume_key: kms.IKey) -> list[iam.PolicyStatement]:
    """A customer-managed volume key: HyperPod creates grants on it with the execution role when it scales out,
    adds nodes or patches them ("Customer managed AWS KMS key encryption for SageMaker HyperPod"). The grants are
    for AWS resources only (the EBS volumes): `kms:GrantIsForAWSResource` is a condition key of CreateGrant and
    not of DescribeKey, hence two statements."""
    return [
        iam.PolicyStatement(
            sid="VolumeKeyGrants",
            actions=["kms:CreateGrant"],
            resources=[volume_key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
        iam.PolicyStatement(sid="DescribeVolumeKey", actions=["kms:DescribeKey"], resources=[volume_key.key_arn]),
    ]


def eks_node_statements(eks_cluster_arn: str) -> list[iam.PolicyStatement]:
    """What an EKS node of HyperPod needs beyond a Slurm node: EKS Pod Identity credentials for its pods (the
    vpc-cni and the CloudWatch agent get theirs that way; the eks-pod-identity-agent asks with the node role) and
    image pulls from ECR (SageMaker HyperPod docs, IAM role for HyperPod with EKS; EKS User Guide, "Amazon EKS
    node IAM role"), and the VPC CNI's ENI and IP calls. No access entry is made here: HyperPod creates the
    execution role's own at CreateCluster (SageMaker API, ClusterMetadata.EksRoleAccessEntries: "created by
    HyperPod on your behalf")."""
    ec2_arn = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    return [
        iam.PolicyStatement(
            sid="PodIdentity", actions=["eks-auth:AssumeRoleForPodIdentity"], resources=[eks_cluster_arn]
        ),
        # The VPC CNI (aws-node) on a HyperPod node works with the node's execution role, as AWS's HyperPod EKS
        # reference sets it (aws/sagemaker-hyperpod-cluster-setup, eks/cloudformation/sagemaker-iam-role-template
        # .yaml: its AmazonEKS_CNI_Policy equivalent): attach pod ENIs to the instance, assign and release their IPs,
        # and describe the instance, its type and tags. Creating and tagging ENIs in the cluster subnet is above.
        iam.PolicyStatement(
            sid="VpcCniInterfaces",
            actions=[
                "ec2:AttachNetworkInterface",
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
                "ec2:ModifyNetworkInterfaceAttribute",
            ],
            # The instance lives in a SageMaker service account (its ID and the instance IDs are not known in
            # advance); ModifyNetworkInterfaceAttribute also authorizes on the security groups the CNI sets on a pod
            # ENI (Service Authorization Reference, Amazon EC2).
            resources=[
                f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:*:instance/*",
                f"{ec2_arn}:network-interface/*",
                f"{ec2_arn}:security-group/*",
            ],
        ),
        iam.PolicyStatement(
            sid="VpcCniDescribe",
            actions=["ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeTags"],
            resources=["*"],
        ),
        iam.PolicyStatement(sid="EcrToken", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
        iam.PolicyStatement(
            sid="EcrPull",
            actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            resources=[f"arn:{Aws.PARTITION}:ecr:{Aws.REGION}:*:repository/*"],
        ),
    ]


def execution_statements(
    bucket: s3.IBucket,
    key: kms.IKey,
    subnet: ec2.ISubnet,
    security_groups: Sequence[ec2.ISecurityGroup],
    scripts_prefix: str,
) -> list[iam.PolicyStatement]:
    """What every HyperPod node's execution role needs: the lifecycle scripts under `scripts_prefix` (and their key),
    the node ENIs in the cluster subnet, HyperPod's log groups and metrics, Session Manager (SageMaker HyperPod
    prerequisites, "IAM role for SageMaker HyperPod")."""
    ec2_arn = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    interfaces = f"{ec2_arn}:network-interface/*"
    clusters_logs = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:/aws/sagemaker/Clusters/*"
    return [
        iam.PolicyStatement(
            sid="ReadLifecycleScripts",
            actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{scripts_prefix}*")],
        ),
        iam.PolicyStatement(
            sid="ListLifecycleScripts",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            # The prefix with and without its trailing slash: HyperPod's listing request is not documented.
            conditions={"StringLike": {"s3:prefix": [scripts_prefix.rstrip("/"), f"{scripts_prefix}*"]}},
        ),
        iam.PolicyStatement(sid="DecryptScripts", actions=["kms:Decrypt"], resources=[key.key_arn]),
        # The node ENIs HyperPod creates in the cluster subnet with the cluster's security groups.
        iam.PolicyStatement(
            sid="CreateNodeInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[
                interfaces,
                f"{ec2_arn}:subnet/{subnet.subnet_id}",
                *(f"{ec2_arn}:security-group/{g.security_group_id}" for g in security_groups),
            ],
        ),
        iam.PolicyStatement(
            sid="ManageNodeInterfaces",
            actions=[
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
                "ec2:CreateTags",
            ],
            resources=[interfaces],
        ),
        # DetachNetworkInterface authorizes on the instance as well as on the interface (Service Authorization
        # Reference, Amazon EC2): HyperPod's instances live in a SageMaker service account, so their ARNs name
        # that account, not ours.
        iam.PolicyStatement(
            sid="DetachNodeInterfaces",
            actions=["ec2:DetachNetworkInterface"],
            resources=[interfaces, f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:*:instance/*"],
        ),
        iam.PolicyStatement(
            sid="DescribeNetwork",
            actions=[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="ClusterLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[clusters_logs, f"{clusters_logs}:log-stream:*"],
        ),
        iam.PolicyStatement(
            sid="ClusterMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/Clusters*"}},
        ),
        iam.PolicyStatement(
            sid="SessionManager",
            actions=[
                "ssmmessages:CreateControlChannel",
                "ssmmessages:CreateDataChannel",
                "ssmmessages:OpenControlChannel",
                "ssmmessages:OpenDataChannel",
            ],
            resources=["*"],
        ),
    ]
