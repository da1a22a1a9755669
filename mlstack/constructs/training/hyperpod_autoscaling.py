"""HyperPod autoscaling of `HyperPodCluster` (`autoscaling=True`): the cluster role HyperPod's managed Karpenter
assumes to add and remove nodes, and the cluster's AutoScaling property.

The role's permissions are the documented ones (SageMaker HyperPod docs, "Create an IAM role for HyperPod autoscaling
with Karpenter": https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-autoscaling-iam.html):
`sagemaker:BatchAddClusterNodes` and `BatchDeleteClusterNodes` on clusters of this account, and, for a
customer-managed volume key, grants on that key for AWS resources through SageMaker. Narrower than the page: this
region and account instead of `*:*`, and the one volume key instead of every key. Not the one cluster: its ARN
carries an ID generated at create, and the role must hold its policy before CreateCluster (HyperPod takes the role in
that call).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Aws, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

SERVICE_PRINCIPAL = "hyperpod.sagemaker.amazonaws.com"
GRANT_OPERATIONS = (
    "CreateGrant",
    "Decrypt",
    "DescribeKey",
    "GenerateDataKeyWithoutPlaintext",
    "ReEncryptTo",
    "ReEncryptFrom",
    "RetireGrant",
)
"""The grant operations the documented policy allows HyperPod to give the nodes' volumes."""


def check_autoscaling(eks_cluster_arn: str | None, node_provisioning_mode: str | None) -> None:
    if eks_cluster_arn is None or node_provisioning_mode != "Continuous":
        raise ValueError(
            "autoscaling: HyperPod autoscaling needs the EKS orchestrator and node_provisioning_mode='Continuous'"
        )


def autoscaling_role(scope: Construct, volume_key: kms.IKey | None) -> tuple[iam.Role, iam.Policy]:
    """The ClusterRole: trusted by HyperPod, allowed to add and remove cluster nodes (and grant the volume key)."""
    role = iam.Role(
        scope,
        "AutoscalingRole",
        assumed_by=iam.ServicePrincipal(SERVICE_PRINCIPAL),
        description="HyperPod managed Karpenter: add and remove the cluster's nodes",
    )
    clusters = f"arn:{Aws.PARTITION}:sagemaker:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/*"
    statements = [
        iam.PolicyStatement(
            sid="ScaleClusterNodes",
            actions=["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"],
            resources=[clusters],
        )
    ]
    if volume_key is not None:
        via = {"kms:ViaService": "sagemaker.*.amazonaws.com"}
        # Two statements where the page has one: kms:GrantIsForAWSResource is a condition key of CreateGrant only
        # (AWS KMS condition keys), so under one statement DescribeKey would never be allowed.
        statements += [
            iam.PolicyStatement(
                sid="VolumeKeyGrants",
                actions=["kms:CreateGrant"],
                resources=[volume_key.key_arn],
                conditions={
                    "StringLike": via,
                    "Bool": {"kms:GrantIsForAWSResource": "true"},
                    "ForAllValues:StringEquals": {"kms:GrantOperations": list(GRANT_OPERATIONS)},
                },
            ),
            iam.PolicyStatement(
                sid="DescribeVolumeKey",
                actions=["kms:DescribeKey"],
                resources=[volume_key.key_arn],
                conditions={"StringLike": via},
            ),
        ]
    policy = iam.Policy(scope, "AutoscalingPolicy", statements=statements)
    policy.attach_to_role(role)
    Validations.of(policy).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:cluster/*]",
            reason=(
                "HyperPod clusters of this account and region: the cluster's ARN has an ID generated at create, and "
                "HyperPod takes the role (with its policy) in CreateCluster, so the policy cannot name it"
            ),
        )
    )
    return role, policy


def autoscaling_config() -> sagemaker.CfnCluster.ClusterAutoScalingConfigProperty:
    return sagemaker.CfnCluster.ClusterAutoScalingConfigProperty(mode="Enable", auto_scaler_type="Karpenter")
