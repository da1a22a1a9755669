"""Permissions a SageMaker role needs when its containers run in a VPC and log to CloudWatch."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam


def grant_vpc_and_logs(role: iam.Role, vpc: ec2.IVpc, *, log_groups: Sequence[str]) -> None:
    """ENIs in `vpc` only, /aws/sagemaker/<kind>* log groups, metrics in SageMaker namespaces.

    SageMaker creates the job's or endpoint's network interfaces with the role (SageMaker developer guide, "Give
    SageMaker AI access to resources in your Amazon VPC"); ec2:Describe* and PutMetricData take no resource ARN.
    """
    stack = Stack.of(role)
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="DescribeNetwork",
            actions=[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeDhcpOptions",
            ],
            resources=["*"],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EnisInThisVpc",
            actions=[
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
            ],
            resources=["*"],
            conditions={"ArnEquals": {"ec2:Vpc": vpc.vpc_arn}},
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SageMakerLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[
                stack.format_arn(service="logs", resource="log-group", resource_name=f"/aws/sagemaker/{kind}*")
                for kind in log_groups
            ],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SageMakerMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/*", "aws/sagemaker/*"]}},
        )
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5",
            reason="S3 access limited to this project's prefixes; ec2:Describe* and PutMetricData take no resource "
            "ARN (PutMetricData limited to SageMaker namespaces); ENI create/delete limited to this VPC with the "
            "ec2:Vpc condition; /aws/sagemaker/* log groups; SageMaker resources named after this project",
        )
    )
