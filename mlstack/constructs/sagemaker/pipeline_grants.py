"""What the two roles of an `MlopsPipeline` may do, call by call, as SageMaker makes the calls at run time.

- The job role is the execution role of every processing and training job: it reads the code assets (an `S3Prefix`
  input is listed first, then read), the inputs and this pipeline's `runs/` prefix, writes there, creates the
  volume-key grant, places ENIs in the VPC and writes logs and metrics.
- The pipeline role starts the jobs, registers versions, passes the job role, and reads `evaluation.json` itself:
  the Condition step's `Std:JsonGet` runs as the pipeline role (SageMaker Developer Guide, "Property Files and
  JsonGet": the pipeline's role needs s3:GetObject on the file), and the file is encrypted with the project key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets

from mlstack.constructs.sagemaker.grants import acknowledge_wildcards, grant_volume_key, grant_vpc_and_logs

RUNS_PREFIX = "runs"
"""Every run writes under s3://<artifacts>/runs/<execution id>/; the job role may write nowhere else."""
EVALUATION_OBJECTS = f"{RUNS_PREFIX}/*/evaluation/*"
"""The Evaluate step's report, read back by the pipeline role for `Std:JsonGet`."""


def grant_job_role(
    role: iam.Role,
    *,
    bucket: s3.IBucket,
    key: kms.IKey,
    code: Sequence[s3_assets.Asset],
    input_prefix: str | None,
    vpc: ec2.IVpc,
) -> None:
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="RunPrefix",
            actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[bucket.arn_for_objects(f"{RUNS_PREFIX}/*")],
        )
    )
    list_prefixes = [f"{RUNS_PREFIX}/*"]
    if input_prefix:
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="InputData", actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{input_prefix}*")]
            )
        )
        list_prefixes.append(f"{input_prefix}*")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="ListOwnPrefixes",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": list_prefixes}},
        )
    )
    for asset in code:
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[asset.bucket.arn_for_objects(asset.s3_object_key)])
        )
    # The code inputs are S3Prefix inputs: SageMaker lists the asset bucket with the object key as prefix before it
    # downloads (SageMaker API Reference, S3DataSource / ProcessingS3Input "S3DataType: S3Prefix").
    stack = Stack.of(role)
    keys_by_bucket: dict[str, tuple[str, list[str]]] = {}
    for asset in code:
        # Each asset's bucket is its own token; they resolve to the same bootstrap bucket.
        resolved = json.dumps(stack.resolve(asset.bucket.bucket_arn), sort_keys=True)
        keys_by_bucket.setdefault(resolved, (asset.bucket.bucket_arn, []))[1].append(asset.s3_object_key)
    for index, (bucket_arn, keys) in enumerate(keys_by_bucket.values()):
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListCodeAssets" if index == 0 else f"ListCodeAssets{index}",
                actions=["s3:ListBucket"],
                resources=[bucket_arn],
                conditions={"StringEquals": {"s3:prefix": sorted(keys)}},
            )
        )
    key.grant_encrypt_decrypt(role)
    grant_volume_key(role, key)
    grant_vpc_and_logs(role, vpc, log_groups=("ProcessingJobs", "TrainingJobs"))
    acknowledge_wildcards(
        role,
        "S3 objects under this pipeline's runs/ prefix; KMS grant actions on the project key only; "
        "ec2:Describe*, ecr:GetAuthorizationToken and PutMetricData take no resource ARN; ENI create/delete only "
        "in this VPC (ec2:Vpc condition); /aws/sagemaker/* log groups",
    )


def grant_pipeline_role(role: iam.Role, *, job_role: iam.Role, group: str, bucket: s3.IBucket, key: kms.IKey) -> None:
    stack = Stack.of(role)

    def arn(resource: str, name: str) -> str:
        return stack.format_arn(service="sagemaker", resource=resource, resource_name=name)

    jobs = [arn(kind, "pipelines-*") for kind in ("processing-job", "training-job")]
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="RunJobs",
            actions=[
                "sagemaker:CreateProcessingJob",
                "sagemaker:DescribeProcessingJob",
                "sagemaker:StopProcessingJob",
                "sagemaker:CreateTrainingJob",
                "sagemaker:DescribeTrainingJob",
                "sagemaker:StopTrainingJob",
                "sagemaker:AddTags",
            ],
            resources=jobs,
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="RegisterModel",
            actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage", "sagemaker:AddTags"],
            resources=[arn("model-package-group", group), arn("model-package", f"{group}/*")],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="ReadEvaluationReport",
            actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(EVALUATION_OBJECTS)],
        )
    )
    key.grant_decrypt(role)
    job_role.grant_pass_role(role)
    acknowledge_wildcards(
        role,
        "jobs SageMaker Pipelines names pipelines-<execution>-<step>-*; versions of this one group; the evaluation "
        "reports under runs/<execution>/evaluation/",
    )
