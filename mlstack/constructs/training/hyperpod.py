"""`HyperPodCluster`: a SageMaker HyperPod cluster (AWS::SageMaker::Cluster) whose nodes are set up by lifecycle
scripts that this construct uploads to S3 before the cluster is created. Orchestrator: Slurm from those scripts
(default), or an EKS cluster the nodes join (`eks_cluster_arn`).

Usable from any CDK app (no blueprint needed)::

    HyperPodCluster(stack, "HyperPod", cluster_name="my-cluster", subnet=subnet, security_groups=[sg],
                         key=key, instance_groups=[HyperPodInstanceGroup(name="controller", instance_type=
                         "ml.m7i.xlarge", count=1, role="controller"), HyperPodInstanceGroup(name="p5",
                         instance_type="ml.p5.48xlarge", count=2, role="compute", efa=True)])
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aws_cdk import Acknowledgment, Aws, Fn, RemovalPolicy, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.training.hyperpod_nag import acknowledge_bucket, acknowledge_deployment

NodeRole = Literal["controller", "login", "compute"]
SCRIPTS_PREFIX = "lifecycle/"
PARAMETERS_FILE = "provisioning_parameters.json"
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
ARN_PREFIX = "arn:<AWS::Partition>"
ARN_SCOPE = "<AWS::Region>:<AWS::AccountId>"
"""How cdk-nag writes the pseudo parameters of an ARN in a finding ID."""


@dataclass(frozen=True)
class HyperPodInstanceGroup:
    """One instance group of the cluster.

    - `instance_type`: the `ml.` name (e.g. `ml.p5.48xlarge`).
    - `role`: the Slurm role the lifecycle scripts give its nodes (one `controller` group per cluster).
    - `threads_per_core`: 1 disables SMT, 2 keeps it (default 2, as HyperPod).
    - `volume_gib`: extra EBS volume at /opt/sagemaker, encrypted with the construct's key (default 200).
    - `deep_health_checks`: subset of `InstanceStress`, `InstanceConnectivity` run before a node joins (default none).
    - `training_plan_arn`: reserved capacity from a SageMaker training plan (default none: on-demand).
    - `efa`: the group uses EFA (only documents intent: HyperPod attaches every EFA the type has itself).
    - `labels`: Kubernetes labels of its nodes (EKS orchestrator only; default none).
    """

    name: str
    instance_type: str
    count: int
    role: NodeRole = "compute"
    threads_per_core: int = 2
    volume_gib: int = 200
    deep_health_checks: tuple[str, ...] = ()
    training_plan_arn: str | None = None
    efa: bool = False
    labels: Mapping[str, str] | None = None


class HyperPodCluster(Construct):
    """HyperPod cluster: Slurm from lifecycle scripts, or nodes of an EKS cluster.

    Props (keyword):
    - `cluster_name`: HyperPod cluster name (create-only: changing it replaces the cluster).
    - `subnet`: the one private subnet of every node (EFA does not cross subnets or AZs).
    - `security_groups`: on every node (1-5); each must allow all traffic from itself (EFA health checks fail
      otherwise), and one must allow outbound traffic to S3 and the SageMaker APIs.
    - `key`: encrypts the lifecycle-script bucket and the nodes' extra EBS volumes.
    - `instance_groups`: Slurm: exactly one `controller` group, optional `login` group, one or more `compute`
      groups; EKS: `compute` groups only.
    - `eks_cluster_arn`: the EKS cluster the nodes join (`Orchestrator.Eks`; create-only). It must use access
      entries (authentication mode API or API_AND_CONFIG_MAP) and have the HyperPod dependencies Helm chart
      installed; HyperPod creates the execution role's access entry itself. Default: none (Slurm).
    - `lifecycle_scripts`: directory uploaded under `s3://<bucket>/lifecycle/` (default: none; required).
    - `on_create`: entry script in that directory (default `on_create.sh`).
    - `fsx_dns_name`, `fsx_mount_name`, `fsx_mount_path`: FSx for Lustre the scripts mount (default: none, `/fsx`).
    - `node_recovery`: `Automatic` (default) or `None`.
    - `removal_policy`: of the script bucket (default `RETAINED`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        subnet: ec2.ISubnet,
        security_groups: Sequence[ec2.ISecurityGroup],
        key: kms.IKey,
        instance_groups: Sequence[HyperPodInstanceGroup],
        lifecycle_scripts: Path,
        on_create: str = "on_create.sh",
        fsx_dns_name: str | None = None,
        fsx_mount_name: str | None = None,
        fsx_mount_path: str = "/fsx",
        node_recovery: Literal["Automatic", "None"] = "Automatic",
        removal_policy: RemovalPolicy = RETAINED,
        eks_cluster_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not 1 <= len(security_groups) <= 5:
            raise ValueError(f"security_groups: HyperPod takes 1 to 5, got {len(security_groups)}")
        roles = [g.role for g in instance_groups]
        if eks_cluster_arn is not None:
            if set(roles) != {"compute"}:
                raise ValueError("instance_groups: an EKS-orchestrated cluster takes compute groups only")
        elif roles.count("controller") != 1 or roles.count("login") > 1 or "compute" not in roles:
            raise ValueError("instance_groups: need one controller group, at most one login group, a compute group")

        # The SageMaker API asks for a lifecycle bucket named sagemaker-* (ClusterLifeCycleConfig.SourceS3Uri: the
        # managed AmazonSageMakerClusterInstanceRolePolicy only reads such buckets). The role below is our own and
        # names this bucket, but the name keeps the documented form. The digest keeps blueprints apart.
        digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:8]
        self.bucket = s3.Bucket(
            self,
            "LifecycleScripts",
            bucket_name=Fn.join("-", ["sagemaker-mlstack", digest, Aws.ACCOUNT_ID, Aws.REGION]),
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=removal_policy,
        )
        acknowledge_bucket(self.bucket)
        sources = [s3deploy.Source.asset(str(lifecycle_scripts), exclude=["__pycache__", "*.pyc", "__init__.py"])]
        if eks_cluster_arn is None:
            parameters = _slurm_parameters(instance_groups, fsx_dns_name, fsx_mount_name, fsx_mount_path)
            sources.append(s3deploy.Source.json_data(PARAMETERS_FILE, parameters))
        self.scripts = s3deploy.BucketDeployment(
            self,
            "LifecycleScriptsUpload",
            destination_bucket=self.bucket,
            destination_key_prefix=SCRIPTS_PREFIX,
            sources=sources,
            prune=True,
            retain_on_delete=False,
            log_group=logs.LogGroup(
                self,
                "UploadLogs",
                encryption_key=key,
                retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=removal_policy,
            ),
        )
        acknowledge_deployment(self.scripts, self.bucket)
        self.source_s3_uri = f"s3://{self.bucket.bucket_name}/{SCRIPTS_PREFIX}"

        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod nodes: read the lifecycle scripts, ENIs in the cluster subnet, logs, metrics, SSM",
        )
        self._grant_node_permissions(key, subnet, security_groups, eks_cluster_arn)

        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            node_recovery=node_recovery,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[g.security_group_id for g in security_groups], subnets=[subnet.subnet_id]
            ),
            instance_groups=[self._group(g, key, on_create) for g in instance_groups],
            orchestrator=(
                sagemaker.CfnCluster.OrchestratorProperty(
                    eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster_arn)
                )
                if eks_cluster_arn is not None
                else None
            ),
        )
        # HyperPod runs the scripts from S3 as soon as CreateCluster launches nodes: they and the role's policy
        # must exist first.
        self.cluster.node.add_dependency(self.scripts)
        self.cluster.node.add_dependency(self.policy)
        self.cluster_arn = self.cluster.attr_cluster_arn

    def _group(
        self, group: HyperPodInstanceGroup, key: kms.IKey, on_create: str
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            execution_role=self.role.role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.source_s3_uri, on_create=on_create
            ),
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.volume_gib, volume_kms_key_id=key.key_arn
                    )
                )
            ],
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            training_plan_arn=group.training_plan_arn,
            kubernetes_config=(
                sagemaker.CfnCluster.ClusterKubernetesConfigProperty(labels=dict(group.labels))
                if group.labels
                else None
            ),
        )

    def _grant_node_permissions(
        self,
        key: kms.IKey,
        subnet: ec2.ISubnet,
        security_groups: Sequence[ec2.ISecurityGroup],
        eks_cluster_arn: str | None,
    ) -> None:
        stack = Stack.of(self)
        ec2_arn = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}"
        interfaces = f"{ec2_arn}:network-interface/*"
        clusters_logs = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:/aws/sagemaker/Clusters/*"
        statements = [
            iam.PolicyStatement(
                sid="ReadLifecycleScripts",
                actions=["s3:GetObject"],
                resources=[self.bucket.arn_for_objects(f"{SCRIPTS_PREFIX}*")],
            ),
            iam.PolicyStatement(
                sid="ListLifecycleScripts",
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{SCRIPTS_PREFIX}*"]}},
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
                    "ec2:DetachNetworkInterface",
                    "ec2:CreateTags",
                ],
                resources=[interfaces],
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
        if eks_cluster_arn is not None:
            statements += _eks_node_statements(eks_cluster_arn)
        policy = iam.Policy(self, "ExecutionPolicy", statements=statements)
        policy.attach_to_role(self.role)
        self.policy = policy
        bucket = stack.get_logical_id(self.bucket.node.default_child)  # type: ignore[arg-type]
        logs_group = f"{ARN_PREFIX}:logs:{ARN_SCOPE}:log-group:/aws/sagemaker/Clusters/*"
        reasons = {
            f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{SCRIPTS_PREFIX}*]": (
                "nodes read every lifecycle script under the prefix this construct uploads"
            ),
            "AwsSolutions-IAM5[Resource::*]": (
                "EC2 Describe* calls take no resource ARN; PutMetricData is conditioned on the /aws/sagemaker/Clusters "
                "namespace; Session Manager channels have no resource ARN (SageMaker HyperPod prerequisites, IAM role "
                "for HyperPod); ecr:GetAuthorizationToken takes no resource ARN (EKS nodes only)"
            ),
            f"AwsSolutions-IAM5[Resource::{ARN_PREFIX}:ecr:<AWS::Region>:*:repository/*]": (
                "EKS nodes pull the HyperPod agents' and EKS add-ons' images from AWS-owned ECR repositories in the "
                "region, whose account IDs differ by region"
            ),
            f"AwsSolutions-IAM5[Resource::{ARN_PREFIX}:ec2:{ARN_SCOPE}:network-interface/*]": (
                "the node ENIs HyperPod creates in the cluster subnet; their IDs are not known in advance"
            ),
            f"AwsSolutions-IAM5[Resource::{ARN_PREFIX}:ec2:{ARN_SCOPE}:instance/*]": (
                "EKS nodes only: the VPC CNI attaches pod ENIs to the node it runs on, whose instance ID HyperPod "
                "assigns at launch"
            ),
            f"AwsSolutions-IAM5[Resource::{logs_group}]": "HyperPod's own log group per cluster (its name has the ID)",
            f"AwsSolutions-IAM5[Resource::{logs_group}:log-stream:*]": "one log stream per node and script",
        }
        for rule_id, reason in reasons.items():
            Validations.of(policy).acknowledge(Acknowledgment(id=rule_id, reason=reason))


HyperPodSlurmCluster = HyperPodCluster
"""The name this construct had before it took an EKS orchestrator."""


def _slurm_parameters(
    groups: Sequence[HyperPodInstanceGroup],
    fsx_dns_name: str | None,
    fsx_mount_name: str | None,
    fsx_mount_path: str,
) -> dict[str, object]:
    """`provisioning_parameters.json` the Slurm lifecycle scripts read (group names = InstanceGroupNames)."""
    controller = next(g for g in groups if g.role == "controller")
    login = next((g for g in groups if g.role == "login"), None)
    parameters: dict[str, object] = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": controller.name,
        "worker_groups": [
            {"instance_group_name": g.name, "partition_name": g.name} for g in groups if g.role == "compute"
        ],
    }
    if login is not None:
        parameters["login_group"] = login.name
    if fsx_dns_name is not None and fsx_mount_name is not None:
        parameters.update(fsx_dns_name=fsx_dns_name, fsx_mountname=fsx_mount_name, fsx_mount_path=fsx_mount_path)
    return parameters


def _eks_node_statements(eks_cluster_arn: str) -> list[iam.PolicyStatement]:
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
            resources=[f"{ec2_arn}:instance/*", f"{ec2_arn}:network-interface/*"],
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
