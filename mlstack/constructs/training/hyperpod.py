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

from aws_cdk import Aws, Fn, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.storage.buckets import kms_bucket
from mlstack.constructs.training.host_agent import (
    HOST_AGENT_FILES,
    HOST_AGENT_SCRIPT,
    acknowledge_host_agent,
    host_agent_statements,
)
from mlstack.constructs.training.hyperpod_autoscaling import autoscaling_config, autoscaling_role, check_autoscaling
from mlstack.constructs.training.hyperpod_nag import (
    acknowledge_bucket,
    acknowledge_deployment,
    acknowledge_execution_policy,
)
from mlstack.constructs.training.hyperpod_policy import eks_node_statements, execution_statements, volume_key_statements
from mlstack.constructs.training.metric_names import HostAgent

NodeRole = Literal["controller", "login", "compute"]
SCRIPTS_PREFIX = "lifecycle/"
PARAMETERS_FILE = "provisioning_parameters.json"
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")


@dataclass(frozen=True)
class HyperPodInstanceGroup:
    """One instance group of the cluster.

    - `instance_type`: the `ml.` name (e.g. `ml.p5.48xlarge`).
    - `role`: the Slurm role the lifecycle scripts give its nodes (one `controller` group per cluster).
    - `threads_per_core`: 1 disables SMT, 2 keeps it (default 2, as HyperPod).
    - `volume_gib`: extra EBS volume at /opt/sagemaker, encrypted with the construct's `volume_key` when it has one
      (default 200).
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
    - `key`: encrypts the lifecycle-script bucket and its upload logs.
    - `instance_groups`: Slurm: exactly one `controller` group, optional `login` group, one or more `compute`
      groups; EKS: `compute` groups only.
    - `eks_cluster_arn`: the EKS cluster the nodes join (`Orchestrator.Eks`; create-only). It must use access
      entries (authentication mode API or API_AND_CONFIG_MAP) and have the HyperPod dependencies Helm chart
      installed; HyperPod creates the execution role's access entry itself. Default: none (Slurm).
    - `lifecycle_scripts`: directory uploaded under `s3://<bucket>/lifecycle/` (default: none; required).
    - `workloads`: a directory uploaded next to the scripts as `lifecycle/<its name>/` (the Slurm scripts stage
      mlstack's `runtime/workloads` on FSx for the first job); `__pycache__`, `serve/` and `bench.py` stay out
      (default: none).
    - `on_create`: entry script in that directory (default `on_create.sh`).
    - `fsx_dns_name`, `fsx_mount_name`, `fsx_mount_path`: FSx for Lustre the scripts mount (default: none, `/fsx`).
    - `node_recovery`: `Automatic` (default) or `None`.
    - `volume_key`: customer-managed key of the nodes' extra EBS volumes (default: none, HyperPod encrypts them
      with an AWS owned key). HyperPod takes one only with `node_provisioning_mode="Continuous"` ("Customer managed
      AWS KMS key encryption for SageMaker HyperPod"), and it creates grants on it with the execution role
      (`kms:CreateGrant`, added here) when it scales, adds or patches nodes.
    - `node_provisioning_mode`: `Continuous` or none (default: HyperPod's standard mode). The SageMaker API
      (CreateCluster NodeProvisioningMode) supports `Continuous` only for EKS-orchestrated clusters.
    - `autoscaling`: HyperPod's managed Karpenter adds and removes the instance groups' nodes, with a cluster role
      of its own (`hyperpod_autoscaling`); needs the EKS orchestrator and Continuous provisioning (default False).
    - `removal_policy`: of the script bucket (default `RETAINED`).
    - `host_agent`: the CloudWatch agent's configuration for the GPU nodes (default none): uploaded with
      `install_cloudwatch_agent.sh` beside the scripts (`HOST_AGENT_FILES`, which on_create.sh runs when present);
      the execution role may publish to its namespace and kernel-log group only.
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
        workloads: Path | None = None,
        volume_key: kms.IKey | None = None,
        node_provisioning_mode: Literal["Continuous"] | None = None,
        host_agent: HostAgent | None = None,
        autoscaling: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if autoscaling:
            check_autoscaling(eks_cluster_arn, node_provisioning_mode)
        if node_provisioning_mode == "Continuous" and eks_cluster_arn is None:
            raise ValueError(
                "node_provisioning_mode: HyperPod supports Continuous only for EKS-orchestrated clusters; omit it "
                "for Slurm"
            )
        if volume_key is not None and node_provisioning_mode != "Continuous":
            raise ValueError(
                "volume_key: HyperPod takes a customer-managed volume key only with node_provisioning_mode="
                "'Continuous' (EKS orchestrator); omit volume_key for an AWS owned key"
            )
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
        self.bucket = kms_bucket(
            self,
            "LifecycleScripts",
            bucket_name=Fn.join("-", ["sagemaker-mlstack", digest, Aws.ACCOUNT_ID, Aws.REGION]),
            key=key,
            access_logs=None,  # acknowledge_bucket records why
            removal_policy=removal_policy,
            lifecycle_rules=(),
            guard_skips=None,
        )
        acknowledge_bucket(self.bucket)
        sources = [s3deploy.Source.asset(str(lifecycle_scripts), exclude=["__pycache__", "*.pyc", "__init__.py"])]
        if workloads is not None:
            name = workloads.name
            keep_only = ["*", f"!{name}", f"!{name}/**", f"{name}/serve", f"{name}/bench.py", "**/__pycache__"]
            sources.append(s3deploy.Source.asset(str(workloads.parent), exclude=[*keep_only, "**/*.pyc"]))
        if eks_cluster_arn is None:
            parameters = slurm_parameters(instance_groups, fsx_dns_name, fsx_mount_name, fsx_mount_path)
            sources.append(s3deploy.Source.json_data(PARAMETERS_FILE, parameters))
        if host_agent is not None:
            script, config = HOST_AGENT_FILES
            sources.append(s3deploy.Source.data(script, HOST_AGENT_SCRIPT.read_text(encoding="utf-8")))
            sources.append(s3deploy.Source.data(config, host_agent.config))
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
                retention=logs.RetentionDays.ONE_YEAR,  # a few lines per deploy; Control Tower asks for a year
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
        self._grant_node_permissions(key, subnet, security_groups, eks_cluster_arn, volume_key)
        if host_agent is not None:
            for statement in host_agent_statements(host_agent):
                self.policy.add_statements(statement)
            acknowledge_host_agent(self.policy, host_agent)
        scaler = autoscaling_role(self, volume_key) if autoscaling else None

        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            node_recovery=node_recovery,
            node_provisioning_mode=node_provisioning_mode,
            auto_scaling=autoscaling_config() if scaler else None,
            cluster_role=scaler[0].role_arn if scaler else None,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[g.security_group_id for g in security_groups], subnets=[subnet.subnet_id]
            ),
            instance_groups=[self._group(g, volume_key, on_create) for g in instance_groups],
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
        self.cluster.node.add_dependency(self.policy, *(scaler[1:] if scaler else ()))
        self.cluster_arn = self.cluster.attr_cluster_arn
        self.cluster_name = cluster_name
        self.instance_groups = tuple(instance_groups)

    def _group(
        self, group: HyperPodInstanceGroup, volume_key: kms.IKey | None, on_create: str
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
                        volume_size_in_gb=group.volume_gib,
                        volume_kms_key_id=volume_key.key_arn if volume_key is not None else None,
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
        volume_key: kms.IKey | None,
    ) -> None:
        statements = execution_statements(self.bucket, key, subnet, security_groups, SCRIPTS_PREFIX)
        if eks_cluster_arn is not None:
            statements += eks_node_statements(eks_cluster_arn)
        if volume_key is not None:
            statements += volume_key_statements(volume_key)
        policy = iam.Policy(self, "ExecutionPolicy", statements=statements)
        policy.attach_to_role(self.role)
        self.policy = policy
        acknowledge_execution_policy(policy, self.bucket, SCRIPTS_PREFIX)


HyperPodSlurmCluster = HyperPodCluster
"""The name this construct had before it took an EKS orchestrator."""


def slurm_parameters(
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
