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
from mlstack.config.training_engines import BatchConfig
from mlstack.constructs.network.ml_vpc import retention
from mlstack.constructs.storage.fsx_lustre import FsxLustre
from mlstack.constructs.training.batch import BatchMultiNodeTraining
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.design.training import BATCH_IMAGE_TYPE
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training import fsx_props
from mlstack.stacks.training_base import TrainingEngineStack
from mlstack.stacks.training_hyperpod import node_security_group
from mlstack.stacks.training_image import job_image


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
            image_type=BATCH_IMAGE_TYPE,
        )
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
