"""`TrainingClusterStack` for `training.engine: batch`: AWS Batch multi-node parallel training on the one node group
of the blueprint, EFA from the catalog, FSx for Lustre at /fsx.

Its part of `mlstack plan` is `mlstack.plan.training_engines`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from mlstack.config import BlueprintConfig
from mlstack.config.training import SHIPPED_SCRIPT
from mlstack.config.training_engines import BatchConfig
from mlstack.constructs.network.ml_vpc import retention
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training.batch import BatchMultiNodeTraining
from mlstack.constructs.training.batch_job import MAX_ATTEMPTS
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.design.host_metrics import host_agent
from mlstack.design.training import BATCH_IMAGE_TYPE
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training import fsx_props
from mlstack.stacks.training_base import TrainingEngineStack
from mlstack.stacks.training_hyperpod import node_security_group
from mlstack.stacks.training_image import job_image
from mlstack.stacks.training_ops import add_operations
from mlstack.workloads import resilience


class BatchTrainingStack(TrainingEngineStack):
    """Batch compute environment, job queue and multi-node job definition; EFA and node groups; FSx."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        blueprint: BlueprintConfig,
        network: NetworkStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            network=network,
            description=f"mlstack {blueprint.name}: AWS Batch multi-node parallel training, EFA, FSx for Lustre",
            **kwargs,
        )
        training = self.training
        settings = training.batch or BatchConfig()
        group = training.node_groups[0]
        subnet = network.network.subnet_in(training.zone_of(group, blueprint.zones))
        self.efa = EfaNetworking(
            self, "Efa", vpc=network.vpc, subnet=subnet, placement_group=group.efa and group.uses_placement_group
        )
        self.node_security_group = node_security_group(self, network.vpc)
        groups = [self.efa.security_group, self.node_security_group]
        self.fsx: FsxLustre | None = None
        if training.fsx is not None:
            self.fsx = FsxLustre(
                self,
                "Fsx",
                vpc=network.vpc,
                subnet=network.network.subnet_in(training.fsx_zone(blueprint.zones)),
                key=network.key,
                **fsx_props(training.fsx),
                clients=ec2.Connections(security_groups=groups),
                removal_policy=self.removal_policy,
            )
        # The image `cdk deploy` builds from runtime/containers/train.Dockerfile (output TrainingImageUri), with
        # the reference script the default training.job.script names; or the blueprint's training.job.image.
        image = job_image(self, blueprint)
        self.batch = BatchMultiNodeTraining(
            self,
            "Batch",
            name=settings.name,
            subnet=subnet,
            efa=self.efa,
            vpc_default_security_group_id=network.vpc.vpc_default_security_group,
            security_groups=[self.node_security_group],
            key=network.key,
            instance_type=group.instance_type,
            max_nodes=group.max_size,
            nodes=training.job.nodes,
            image=image,
            script=training.job.script,
            # The shipped script checkpoints to FSx per job (MNP nodes' AWS_BATCH_JOB_ID is `<job id>#<node>`;
            # every attempt of a job has its ID) and resumes on a retry; a retry follows a lost host or worker,
            # not an application error (mlstack.workloads.resilience).
            launcher=resilience.launcher(training),
            script_args=resilience.checkpoint_args(training, "${AWS_BATCH_JOB_ID%#*}")
            if training.job.script == SHIPPED_SCRIPT
            else (),
            retry_attempts=min(training.job.max_retries + 1, MAX_ATTEMPTS),
            exit_codes=[resilience.APP_ERROR_EXIT] if training.job.script == SHIPPED_SCRIPT else [],
            capacity_reservation_id=group.capacity.reservation_id,
            capacity_block=group.capacity.type == "capacity_block",
            fsx_dns_name=self.fsx.dns_name if self.fsx else None,
            fsx_mount_name=self.fsx.mount_name if self.fsx else None,
            root_volume_gib=group.root_volume_gib,
            shared_memory_mib=settings.shared_memory_mib,
            log_retention=retention(settings.log_retention_days),
            queue_priority=settings.job_queue_priority,
            removal_policy=self.removal_policy,
            update_job_timeout_minutes=settings.update_job_timeout_minutes,
            # SIGTERM to SIGKILL of a stopped job (TerminateJob by a scale-down): the pods' grace on EKS.
            stop_timeout_s=resilience.TERMINATION_GRACE_S,
            image_type=BATCH_IMAGE_TYPE,
            host_agent=host_agent(blueprint, training),
        )
        self.operations = add_operations(
            self, network, fsx=self.fsx, job_log_group=self.batch.log_group, batch=self.batch
        )
        kernel_log = self.operations.observability.host_log_group
        if kernel_log is not None:
            # The agent's first log events need the group, and its calls the instance role's default policy (its
            # grants): instances can start as soon as the compute environment exists (min vCPUs above 0).
            self.batch.compute_environment.node.add_dependency(kernel_log, self.batch.instance_role)
        # What `mlstack acceptance` reads after the deploy to register its nccl-tests job definition beside the
        # training one (the job queue's name is fixed: stack name and training.batch.name).
        CfnOutput(self, "BatchJobLogGroup", value=self.batch.log_group.log_group_name)
        CfnOutput(self, "BatchJobRoleArn", value=self.batch.job_role.role_arn)
        CfnOutput(self, "BatchJobQueue", value=self.batch.job_queue.ref)
        CfnOutput(
            self,
            "BatchJobDefinition",
            value=self.batch.job_definition.ref,
            description="aws batch submit-job --job-queue <BatchJobQueue> --job-definition <this> --job-name run1",
        )
