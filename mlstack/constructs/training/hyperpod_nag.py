"""cdk-nag and checkov acknowledgements of the HyperPod construct's generated pieces (lifecycle bucket, upload)."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy


def acknowledge_bucket(bucket: s3.Bucket) -> None:
    reason = (
        "holds only the lifecycle scripts this stack uploads from mlstack's source; no user data, writes come from "
        "the deployment only"
    )
    Validations.of(bucket).acknowledge(Acknowledgment(id="AwsSolutions-S1", reason=reason))
    cfn = bucket.node.default_child
    assert isinstance(cfn, CfnResource)
    cfn.add_metadata("checkov", {"skip": [{"id": "CKV_AWS_18", "comment": reason}]})


def acknowledge_deployment(deployment: s3deploy.BucketDeployment, bucket: s3.Bucket) -> None:
    """cdk-nag findings on the singleton function CDK's BucketDeployment generates (not configurable from here)."""
    stack = Stack.of(deployment)
    handler = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
    bucket_id = stack.get_logical_id(bucket.node.default_child)  # type: ignore[arg-type]
    managed = "Policy::arn:<AWS::Partition>:iam::aws:policy"
    # cdk-nag writes an environment-agnostic stack's region as the pseudo parameter.
    region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
    copy = "CDK's BucketDeployment copies the asset from the CDK asset bucket into the lifecycle prefix"
    reasons = {
        f"AwsSolutions-IAM4[{managed}/service-role/AWSLambdaBasicExecutionRole]": (
            "CDK's BucketDeployment function: CloudWatch Logs for its own log streams only"
        ),
        "AwsSolutions-L1": "runtime of CDK's BucketDeployment function is fixed by aws-cdk-lib",
        **{
            f"AwsSolutions-IAM5[Action::{action}]": copy
            for action in (
                "s3:GetBucket*",
                "s3:GetObject*",
                "s3:List*",
                "s3:Abort*",
                "s3:DeleteObject*",
                "kms:GenerateDataKey*",
                "kms:ReEncrypt*",
            )
        },
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-{region}/*]": copy,
        f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]": copy,
    }
    for rule_id, reason in reasons.items():
        Validations.of(handler).acknowledge(Acknowledgment(id=rule_id, reason=reason))
    function = handler.node.default_child
    assert isinstance(function, CfnResource)
    generated = "CDK's BucketDeployment function, run once per deployment by CloudFormation"
    function.add_metadata(
        "checkov",
        {
            "skip": [
                {"id": "CKV_AWS_116", "comment": f"{generated}: a failure fails the stack update, no DLQ to read"},
                {"id": "CKV_AWS_117", "comment": f"{generated}: reaches only S3 (no VPC resource)"},
                {"id": "CKV_AWS_115", "comment": f"{generated}: one invocation per deployment"},
                {"id": "CKV_AWS_173", "comment": f"{generated}: its environment holds no secret"},
            ]
        },
    )
