"""The calls each kind of run-time principal makes, by service: the one table `mlstack access` checks.

The table describes services, not blueprints. A `CallSpec` names an action, a resource pattern and the
context keys the request carries; `each` names a list of facts that `principals` reads from the blueprint's
templates (one call per fact: every input of a job, every image, every volume key), and the pattern's
`{fields}` come from that fact plus `{region}` and `{account}`. Calls a service makes with the caller's or the
role's credentials (SageMaker granting itself a volume key, listing an `S3Prefix` input, writing its log
streams) are listed like any other call, with the page that documents them.

`either` names a fact field holding a second role: the call is allowed when either principal's policies allow
it (the SageMaker API permissions reference: `kms:CreateGrant` for a volume key is needed "only if ... the
associated role does not have a policy that permits this action").
"""

from __future__ import annotations

from mlstack.access.calls_karpenter import KARPENTER_CALLS
from mlstack.access.callspec import CallSpec
from mlstack.access.callspec import call as _c
from mlstack.access.callspec import call_with as _ctx
from mlstack.access.sources import SOURCES

__all__ = ["ASSUMED_BY", "KINDS", "SOURCES", "CallSpec"]


_S3_VIA = {"kms:ViaService": "s3.{region}.amazonaws.com"}
_SM_VIA = {"kms:ViaService": "sagemaker.{region}.amazonaws.com", "kms:GrantIsForAWSResource": "true"}
_ENI = "arn:aws:ec2:{region}:{account}:network-interface/eni-0123456789abcdef0"
_VPC_CTX = {"ec2:Vpc": "{vpc_arn}", "ec2:Subnet": "{subnet_arn}"}

# Calls of the CloudWatch agent on an engine's own GPU hosts (mlstack.constructs.training.host_agent).
_HOST_AGENT = [
    _ctx("cloudwatch:PutMetricData", "*", "cw-agent-ec2", "host_agent", {"cloudwatch:namespace": "{namespace}"}),
    _c(
        "logs:CreateLogStream",
        "arn:aws:logs:{region}:{account}:log-group:{group}:log-stream:{stream}",
        "cw-agent-ec2",
        "host_agent",
    ),
    _c(
        "logs:PutLogEvents",
        "arn:aws:logs:{region}:{account}:log-group:{group}:log-stream:{stream}",
        "cw-agent-ec2",
        "host_agent",
    ),
]

# Calls of a SageMaker job (processing, training, monitoring) or endpoint in a VPC, made with its role.
_SAGEMAKER_VPC = [
    _ctx("ec2:CreateNetworkInterface", "{subnet_arn}", "sm-roles", "vpcs", {"ec2:Vpc": "{vpc_arn}"}),
    _ctx("ec2:CreateNetworkInterface", "{sg_arn}", "sm-roles", "vpcs", {"ec2:Vpc": "{vpc_arn}"}),
    _ctx("ec2:CreateNetworkInterface", _ENI, "sm-roles", "vpcs", _VPC_CTX),
    _ctx("ec2:CreateNetworkInterfacePermission", _ENI, "sm-roles", "vpcs", _VPC_CTX),
    _ctx("ec2:DeleteNetworkInterface", _ENI, "sm-roles", "vpcs", _VPC_CTX),
    _ctx("ec2:DeleteNetworkInterfacePermission", _ENI, "sm-roles", "vpcs", _VPC_CTX),
    _c("ec2:DescribeNetworkInterfaces", "*", "sm-roles", "vpcs"),
    _c("ec2:DescribeVpcs", "*", "sm-roles", "vpcs"),
    _c("ec2:DescribeDhcpOptions", "*", "sm-roles", "vpcs"),
    _c("ec2:DescribeSubnets", "*", "sm-roles", "vpcs"),
    _c("ec2:DescribeSecurityGroups", "*", "sm-roles", "vpcs"),
]
_IMAGES = [
    _c("ecr:GetAuthorizationToken", "*", "sm-roles", "images"),
    _c("ecr:BatchCheckLayerAvailability", "{repository}", "sm-roles", "images"),
    _c("ecr:BatchGetImage", "{repository}", "sm-roles", "images"),
    _c("ecr:GetDownloadUrlForLayer", "{repository}", "sm-roles", "images"),
]
_LOG_STREAM = "arn:aws:logs:{region}:{account}:log-group:{group}:log-stream:{stream}"
_SAGEMAKER_LOGS = [
    _c("logs:CreateLogGroup", "arn:aws:logs:{region}:{account}:log-group:{group}", "sm-roles", "logs"),
    _c("logs:CreateLogStream", _LOG_STREAM, "sm-logs", "logs"),
    _c("logs:PutLogEvents", _LOG_STREAM, "sm-logs", "logs"),
    _c("logs:DescribeLogStreams", "arn:aws:logs:{region}:{account}:log-group:{group}", "sm-roles", "logs"),
    _ctx("cloudwatch:PutMetricData", "*", "sm-roles", "logs", {"cloudwatch:namespace": "{group}"}),
]
_DATA = [
    _ctx("s3:ListBucket", "{bucket_arn}", "sm-roles", "s3_prefix_inputs", {"s3:prefix": "{prefix}"}),
    _c("s3:GetObject", "{object_arn}", "sm-roles", "inputs"),
    _ctx("kms:Decrypt", "{key}", "s3-kms", "input_keys", _S3_VIA),
    _c("s3:PutObject", "{object_arn}", "sm-roles", "outputs"),
    _ctx("kms:GenerateDataKey", "{key}", "s3-kms", "output_keys", _S3_VIA),
    _ctx("kms:Decrypt", "{key}", "s3-kms", "output_keys", _S3_VIA),
]

KINDS: dict[str, tuple[str, list[CallSpec]]] = {
    "sagemaker-job": (
        "SageMaker processing, training or monitoring job (execution role)",
        _DATA + _IMAGES + _SAGEMAKER_LOGS + _SAGEMAKER_VPC,
    ),
    "sagemaker-job-caller": (
        "starts SageMaker jobs (passes the job role; SageMaker grants itself the volume key as the caller)",
        [
            _c("sagemaker:{create}", "{job_arn}", "sm-api", "jobs"),
            _c("sagemaker:{describe}", "{job_arn}", "sm-api", "jobs"),
            _c("sagemaker:AddTags", "{job_arn}", "sm-api", "jobs"),
            _ctx("iam:PassRole", "{role}", "sm-api", "jobs", {"iam:PassedToService": "sagemaker.amazonaws.com"}),
            _ctx("kms:CreateGrant", "{key}", "sm-api", "volume_keys", _SM_VIA, either="role"),
            _ctx(
                "kms:DescribeKey",
                "{key}",
                "sm-api",
                "volume_keys",
                {"kms:ViaService": _SM_VIA["kms:ViaService"]},
                either="role",
            ),
        ],
    ),
    "sagemaker-pipeline": (
        "SageMaker pipeline execution role (reads property files for JsonGet, registers models)",
        [
            _c("s3:GetObject", "{object_arn}", "sm-property-files", "property_files"),
            _ctx("kms:Decrypt", "{key}", "s3-kms", "property_file_keys", _S3_VIA),
            _c("sagemaker:CreateModelPackage", "{package_arn}", "sm-api", "model_packages"),
            _c("sagemaker:DescribeModelPackage", "{package_arn}", "sm-api", "model_packages"),
        ],
    ),
    "sagemaker-endpoint": (
        "SageMaker model / endpoint execution role",
        [
            _c("s3:GetObject", "{object_arn}", "sm-roles", "inputs"),
            _ctx("kms:Decrypt", "{key}", "s3-kms", "input_keys", _S3_VIA),
            _c("s3:PutObject", "{object_arn}", "sm-async", "outputs"),
            _ctx("kms:GenerateDataKey", "{key}", "s3-kms", "output_keys", _S3_VIA),
            _c("sns:Publish", "{topic}", "sm-async", "topics"),
            _c("kms:GenerateDataKey", "{key}", "sns-kms", "topic_keys"),
            _c("kms:Decrypt", "{key}", "sns-kms", "topic_keys"),
            *_IMAGES,
            *_SAGEMAKER_LOGS,
            *_SAGEMAKER_VPC,
        ],
    ),
    "lambda": (
        "Lambda function (execution role)",
        [
            _c("logs:CreateLogStream", _LOG_STREAM, "lambda-role", "logs"),
            _c("logs:PutLogEvents", _LOG_STREAM, "lambda-role", "logs"),
            _c("ec2:CreateNetworkInterface", _ENI, "lambda-vpc", "vpcs"),
            _c("ec2:DescribeNetworkInterfaces", "*", "lambda-vpc", "vpcs"),
            _c("ec2:DeleteNetworkInterface", _ENI, "lambda-vpc", "vpcs"),
            _c("ec2:AssignPrivateIpAddresses", _ENI, "lambda-vpc", "vpcs"),
            _c("ec2:UnassignPrivateIpAddresses", _ENI, "lambda-vpc", "vpcs"),
            _c("kms:Decrypt", "{key}", "lambda-env-kms", "env_keys"),
        ],
    ),
    "handler": (
        "the function's own calls (from its handler in runtime/)",
        [
            _ctx("{action}", "{resource}", "{source}", "handler_calls", {}),
            _ctx("iam:PassRole", "{role}", "{source}", "handler_passes", {"iam:PassedToService": "{service}"}),
        ],
    ),
    "step-functions": (
        "Step Functions state machine role",
        [
            _c("lambda:InvokeFunction", "{function}", "sfn-lambda", "functions"),
            _c("dynamodb:PutItem", "{table}", "sfn-ddb", "tables"),
            _c("sqs:SendMessage", "{queue}", "sfn-sqs", "queues"),
            _c("kms:GenerateDataKey", "{key}", "sqs-kms", "queue_keys"),
            _c("logs:CreateLogDelivery", "*", "sfn-logs", "log_delivery"),
            _c("logs:GetLogDelivery", "*", "sfn-logs", "log_delivery"),
            _c("logs:UpdateLogDelivery", "*", "sfn-logs", "log_delivery"),
            _c("logs:DeleteLogDelivery", "*", "sfn-logs", "log_delivery"),
            _c("logs:ListLogDeliveries", "*", "sfn-logs", "log_delivery"),
            _c("logs:PutResourcePolicy", "*", "sfn-logs", "log_delivery"),
            _c("logs:DescribeResourcePolicies", "*", "sfn-logs", "log_delivery"),
            _c("logs:DescribeLogGroups", "*", "sfn-logs", "log_delivery"),
            _c("xray:PutTraceSegments", "*", "sfn-xray", "tracing"),
            _c("xray:PutTelemetryRecords", "*", "sfn-xray", "tracing"),
        ],
    ),
    "events-target": (
        "EventBridge rule target role",
        [_c("states:StartExecution", "{state_machine}", "events-sfn", "state_machines")],
    ),
    "hyperpod": (
        "SageMaker HyperPod cluster execution role",
        [
            _ctx("s3:ListBucket", "{bucket_arn}", "sm-hyperpod", "s3_prefix_inputs", {"s3:prefix": "{prefix}"}),
            _c("s3:GetObject", "{object_arn}", "sm-hyperpod", "inputs"),
            _ctx("kms:Decrypt", "{key}", "s3-kms", "input_keys", _S3_VIA),
            _c("logs:CreateLogStream", _LOG_STREAM, "sm-hyperpod", "logs"),
            _c("logs:PutLogEvents", _LOG_STREAM, "sm-hyperpod", "logs"),
            _ctx(
                "cloudwatch:PutMetricData",
                "*",
                "sm-hyperpod",
                "logs",
                {"cloudwatch:namespace": "/aws/sagemaker/Clusters"},
            ),
            _c("ec2:DetachNetworkInterface", _ENI, "sm-hyperpod", "vpcs"),
            # DetachNetworkInterface authorizes on the instance as well as the interface (Service Authorization
            # Reference, Amazon EC2 actions).
            _c(
                "ec2:DetachNetworkInterface",
                "arn:aws:ec2:{region}:{account}:instance/i-0123456789abcdef0",
                "sar",
                "vpcs",
            ),
            _c("ec2:CreateTags", _ENI, "sm-hyperpod", "vpcs"),
            *_SAGEMAKER_VPC,
            *_HOST_AGENT,
        ],
    ),
    "hyperpod-autoscaler": (
        "SageMaker HyperPod autoscaling cluster role (managed Karpenter adds and removes nodes)",
        [
            # A pending pod: HyperPod's Karpenter adds a node to the instance group, and removes it once empty.
            _c("sagemaker:BatchAddClusterNodes", "{cluster_arn}", "sm-hyperpod-autoscaling", "scaled_clusters"),
            _c("sagemaker:BatchDeleteClusterNodes", "{cluster_arn}", "sm-hyperpod-autoscaling", "scaled_clusters"),
            # The new node's EBS volume with the customer-managed key: SageMaker grants it with this role.
            _ctx("kms:CreateGrant", "{key}", "sm-hyperpod-autoscaling", "volume_keys", _SM_VIA),
            _ctx(
                "kms:DescribeKey",
                "{key}",
                "sm-hyperpod-autoscaling",
                "volume_keys",
                {"kms:ViaService": "sagemaker.{region}.amazonaws.com"},
            ),
        ],
    ),
    "batch-instance": (
        "AWS Batch container instance role (ECS agent)",
        [
            _c("ecs:DiscoverPollEndpoint", "*", "batch-instance", "agent"),
            _c(
                "ecs:RegisterContainerInstance",
                "arn:aws:ecs:{region}:{account}:cluster/AWSBatch-x",
                "batch-instance",
                "agent",
            ),
            _c("ecs:Poll", "arn:aws:ecs:{region}:{account}:container-instance/AWSBatch-x/0", "batch-instance", "agent"),
            _c(
                "ecs:SubmitTaskStateChange",
                "arn:aws:ecs:{region}:{account}:cluster/AWSBatch-x",
                "batch-instance",
                "agent",
            ),
            _c("logs:CreateLogStream", _LOG_STREAM, "batch-logs", "logs"),
            _c("logs:PutLogEvents", _LOG_STREAM, "batch-logs", "logs"),
            *_HOST_AGENT,
        ]
        + [_c(c.action, c.resource, "ecr-pull", "images") for c in _IMAGES],
    ),
    "batch-job": ("AWS Batch job role (the workload's own calls only; services make none with it)", []),
    "karpenter": ("Karpenter controller (launches, tags and terminates pool nodes)", KARPENTER_CALLS),
    "eks-node": (
        "EKS node role (kubelet, node agents, image pulls)",
        [
            _c("ec2:DescribeInstances", "*", "eks-node", "agent"),
            _c("eks-auth:AssumeRoleForPodIdentity", "{cluster}", "eks-pod-identity", "pod_identity"),
            *_HOST_AGENT,
        ]
        + [_c(c.action, c.resource, "eks-node", "images") for c in _IMAGES],
    ),
    "eks-pod-identity": (
        "EKS Pod Identity role, assumed for a service account",
        [
            _c("sts:TagSession", "{role}", "eks-pod-identity", "trust"),
        ],
    ),
    "vpc-cni": (
        "Amazon VPC CNI plugin (aws-node)",
        [
            _c("ec2:AssignPrivateIpAddresses", _ENI, "eks-cni", "agent"),
            _c("ec2:AttachNetworkInterface", _ENI, "eks-cni", "agent"),
            _c("ec2:CreateNetworkInterface", _ENI, "eks-cni", "agent"),
            _c("ec2:DeleteNetworkInterface", _ENI, "eks-cni", "agent"),
            _c("ec2:DescribeInstances", "*", "eks-cni", "agent"),
            _c("ec2:DescribeNetworkInterfaces", "*", "eks-cni", "agent"),
            _c("ec2:ModifyNetworkInterfaceAttribute", _ENI, "eks-cni", "agent"),
            _c("ec2:UnassignPrivateIpAddresses", _ENI, "eks-cni", "agent"),
            _c("ec2:CreateTags", _ENI, "eks-cni", "agent"),
        ],
    ),
    "cloudwatch-agent": (
        "CloudWatch agent (Container Insights)",
        [
            _c("cloudwatch:PutMetricData", "*", "cw-agent", "agent"),
            _c("logs:CreateLogStream", _LOG_STREAM, "cw-agent", "logs"),
            _c("logs:PutLogEvents", _LOG_STREAM, "cw-agent", "logs"),
            _c("logs:DescribeLogStreams", "arn:aws:logs:{region}:{account}:log-group:{group}:*", "cw-agent", "logs"),
        ],
    ),
    "mountpoint-s3": (
        "Mountpoint for Amazon S3 CSI driver (s3-csi-driver-sa): reads the volumes' prefixes",
        [
            _ctx("s3:ListBucket", "{bucket_arn}", "mountpoint-s3", "s3_prefix_inputs", {"s3:prefix": "{prefix}"}),
            _c("s3:GetObject", "{object_arn}", "mountpoint-s3", "inputs"),
            _ctx("kms:Decrypt", "{key}", "mountpoint-s3", "input_keys", _S3_VIA),
        ],
    ),
    "secret-reader": (
        "Reads a Secrets Manager secret at start (the vLLM API key)",
        [
            _c("secretsmanager:GetSecretValue", "{secret}", "secrets-get", "secrets"),
            _ctx(
                "kms:Decrypt",
                "{key}",
                "secrets-get",
                "secret_keys",
                {"kms:ViaService": "secretsmanager.{region}.amazonaws.com"},
            ),
        ],
    ),
    "eks-admin-host": (
        "EKS admin host instance role (SSM session, update-kubeconfig)",
        [
            _c("eks:DescribeCluster", "{cluster}", "eks-kubeconfig", "clusters"),
            _c(
                "ssm:UpdateInstanceInformation",
                "arn:aws:ec2:{region}:{account}:instance/i-0123456789abcdef0",
                "ssm-instance",
                "agent",
            ),
            _c("ssmmessages:CreateControlChannel", "*", "ssm-instance", "agent"),
            _c("ssmmessages:CreateDataChannel", "*", "ssm-instance", "agent"),
            _c("ssmmessages:OpenControlChannel", "*", "ssm-instance", "agent"),
            _c("ssmmessages:OpenDataChannel", "*", "ssm-instance", "agent"),
        ],
    ),
}


# The service that assumes a role of each kind: every principal's trust policy must let it call sts:AssumeRole
# (Pod Identity also needs sts:TagSession; the `eks-pod-identity` kind lists both).
ASSUMED_BY: dict[str, str] = {
    "sagemaker-job": "sagemaker.amazonaws.com",
    "sagemaker-pipeline": "sagemaker.amazonaws.com",
    "sagemaker-endpoint": "sagemaker.amazonaws.com",
    "hyperpod": "sagemaker.amazonaws.com",
    "hyperpod-autoscaler": "hyperpod.sagemaker.amazonaws.com",
    "lambda": "lambda.amazonaws.com",
    "step-functions": "states.amazonaws.com",
    "events-target": "events.amazonaws.com",
    "batch-instance": "ec2.amazonaws.com",
    "batch-job": "ecs-tasks.amazonaws.com",
    "eks-node": "ec2.amazonaws.com",
    "eks-admin-host": "ec2.amazonaws.com",
    "eks-pod-identity": "pods.eks.amazonaws.com",
}
