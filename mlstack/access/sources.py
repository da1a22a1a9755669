"""The AWS documentation pages the calls of `calls.KINDS` come from: key -> (title, address)."""

from __future__ import annotations

SOURCES: dict[str, tuple[str, str]] = {
    "sm-api": (
        "SageMaker API permissions reference",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html",
    ),
    "sm-roles": ("SageMaker roles", "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html"),
    "sm-logs": (
        "Log groups and streams that SageMaker sends to CloudWatch Logs",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html",
    ),
    "sm-pipelines": (
        "SageMaker Pipelines: IAM access management",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/build-and-manage-access.html",
    ),
    "sm-property-files": (
        "SageMaker Pipelines: pass data between steps (property files, JsonGet)",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/build-and-manage-propertyfile.html",
    ),
    "sm-async": (
        "SageMaker asynchronous inference: prerequisites",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/async-inference-create-endpoint-prerequisites.html",
    ),
    "sm-hyperpod": (
        "IAM role for SageMaker HyperPod",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites-iam.html",
    ),
    "sm-hyperpod-autoscaling": (
        "Create an IAM role for HyperPod autoscaling with Karpenter",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-autoscaling-iam.html",
    ),
    "kms-via": (
        "AWS KMS condition keys: kms:ViaService",
        "https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html",
    ),
    "s3-kms": (
        "Amazon S3: using server-side encryption with AWS KMS keys (SSE-KMS)",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html",
    ),
    "sns-kms": (
        "Amazon SNS: key management (publishers need kms:GenerateDataKey and kms:Decrypt)",
        "https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html",
    ),
    "lambda-role": (
        "Lambda execution role",
        "https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html",
    ),
    "lambda-vpc": (
        "Giving Lambda functions access to resources in a VPC",
        "https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html",
    ),
    "lambda-env-kms": (
        "Securing Lambda environment variables",
        "https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars-encryption.html",
    ),
    "sfn-lambda": (
        "Step Functions: IAM policies for invoking Lambda",
        "https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html",
    ),
    "sfn-ddb": (
        "Step Functions: IAM policies for DynamoDB",
        "https://docs.aws.amazon.com/step-functions/latest/dg/connect-ddb.html",
    ),
    "sfn-sqs": (
        "Step Functions: IAM policies for Amazon SQS",
        "https://docs.aws.amazon.com/step-functions/latest/dg/connect-sqs.html",
    ),
    "sfn-logs": (
        "Step Functions: logging with CloudWatch Logs",
        "https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html",
    ),
    "sfn-xray": (
        "Step Functions: AWS X-Ray",
        "https://docs.aws.amazon.com/step-functions/latest/dg/concepts-xray-tracing.html",
    ),
    "events-sfn": (
        "EventBridge: permissions for targets (states:StartExecution)",
        "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html",
    ),
    "sqs-kms": (
        "Amazon SQS: key management (producers need kms:GenerateDataKey and kms:Decrypt)",
        "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html",
    ),
    "batch-instance": (
        "AWS Batch: Amazon ECS instance role",
        "https://docs.aws.amazon.com/batch/latest/userguide/instance_IAM_role.html",
    ),
    "batch-logs": (
        "AWS Batch: using the awslogs log driver",
        "https://docs.aws.amazon.com/batch/latest/userguide/using_awslogs.html",
    ),
    "ecr-pull": (
        "Amazon ECR: private repository policies (pulling images)",
        "https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-pull.html",
    ),
    "karpenter": (
        "Amazon EKS best practices: Karpenter (controller IAM permissions, interruption handling)",
        "https://docs.aws.amazon.com/eks/latest/best-practices/karpenter.html",
    ),
    "ebs-kms": (
        "Amazon EBS encryption: permissions to launch with a customer managed key",
        "https://docs.aws.amazon.com/ebs/latest/userguide/ebs-encryption-requirements.html",
    ),
    "eks-node": ("Amazon EKS node IAM role", "https://docs.aws.amazon.com/eks/latest/userguide/create-node-role.html"),
    "eks-pod-identity": (
        "EKS Pod Identity: set up the agent and the role",
        "https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html",
    ),
    "mountpoint-s3": (
        "Amazon EKS: deploy the Mountpoint for Amazon S3 driver, step 1 IAM policy (s3:ListBucket on the bucket, "
        "s3:GetObject on its objects; kms:Decrypt for SSE-KMS objects)",
        "https://docs.aws.amazon.com/eks/latest/userguide/s3-csi-create.html",
    ),
    "secrets-get": (
        "AWS Secrets Manager: GetSecretValue (kms:Decrypt on the secret's customer managed key through Secrets "
        "Manager)",
        "https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html",
    ),
    "eks-cni": (
        "Amazon VPC CNI plugin: IAM role",
        "https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html",
    ),
    "cw-agent": (
        "Container Insights prerequisites (CloudWatch agent permissions)",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-prerequisites.html",
    ),
    "cw-agent-ec2": (
        "Create IAM roles to use with the CloudWatch agent on Amazon EC2 instances (PutMetricData, log streams)",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/create-iam-roles-for-cloudwatch-agent.html",
    ),
    "eks-kubeconfig": (
        "Connect kubectl to an EKS cluster (aws eks update-kubeconfig needs eks:DescribeCluster)",
        "https://docs.aws.amazon.com/eks/latest/userguide/create-kubeconfig.html",
    ),
    "ssm-instance": (
        "Systems Manager: instance permissions",
        "https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-instance-permissions.html",
    ),
    "iam-trust": (
        "IAM: service roles and their trust policies (the service calls sts:AssumeRole)",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-service.html",
    ),
    "sar": (
        "Service Authorization Reference",
        "https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html",
    ),
    "textract-s3": (
        "Amazon Textract: asynchronous operations read the document with the caller's permissions",
        "https://docs.aws.amazon.com/textract/latest/dg/api-async.html",
    ),
    "bedrock-invoke": (
        "Amazon Bedrock: Converse API permissions (bedrock:InvokeModel)",
        "https://docs.aws.amazon.com/bedrock/latest/userguide/conversation-inference-call.html",
    ),
}
