"""The training engines other than EKS: SageMaker HyperPod with Slurm, and AWS Batch multi-node parallel.

`training.engine` picks one; every engine reads the same `training.node_groups` (instance type from the catalog,
counts, capacity, EFA, AZ) and `training.fsx`, so the node-group rules of `mlstack/config/training_cluster.py`
apply to all of them. The rules here are the ones an engine adds: which types it offers, which capacity it
accepts, which keys of another engine it ignores. Their rules are in `training_rules.py`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from mlstack import resources
from mlstack.catalog import get_instance
from mlstack.common import LOG_RETENTION_DAYS
from mlstack.config.base import StrictModel
from mlstack.errors import CatalogError

Engine = Literal["eks", "hyperpod-slurm", "hyperpod-eks", "batch"]
"""`eks`: self-managed EKS cluster (default); `hyperpod-slurm`: SageMaker HyperPod with Slurm set up by lifecycle
scripts; `hyperpod-eks`: SageMaker HyperPod instance groups joined to the EKS cluster of the training layer;
`batch`: AWS Batch multi-node parallel jobs on a managed EC2 compute environment."""

HYPERPOD_ENGINES = ("hyperpod-slurm", "hyperpod-eks")
EKS_ENGINES = ("eks", "hyperpod-eks")
"""Engines with an EKS cluster (`training.cluster`, `training.system_node_group`, Kubernetes job manifests)."""

LIFECYCLE_SCRIPTS_DIR = resources.runtime_path("hyperpod_slurm")
"""The lifecycle scripts shipped with mlstack (on_create.sh and its helpers), uploaded to S3 by the stack."""
EKS_LIFECYCLE_SCRIPTS_DIR = LIFECYCLE_SCRIPTS_DIR.parent / "hyperpod_eks"
WORKLOADS_DIR = LIFECYCLE_SCRIPTS_DIR.parent / "workloads"
"""The reference training code, uploaded with the Slurm lifecycle scripts and staged on FSx for the first job."""
"""The (much smaller) lifecycle script of HyperPod nodes that join an EKS cluster."""

HYPERPOD_MAX_INSTANCES = 6758
"""`InstanceCount` maximum of a HyperPod instance group (AWS::SageMaker::Cluster ClusterInstanceGroup schema)."""

_TRAINING_PLAN_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/[a-zA-Z0-9-]{1,63}$")
_GROUP_NAME = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"


def _hyperpod_type(value: str) -> str:
    """A catalog type HyperPod offers (`ml.` names accepted); the EC2 name is stored."""
    try:
        it = get_instance(value)
    except CatalogError as err:
        raise ValueError(str(err).replace("\n", "; ") + "; see `mlstack advise` for the catalog") from None
    if not it.sagemaker_hyperpod:
        raise ValueError(f"ml.{it.name} is not a HyperPod cluster instance type; pick one `mlstack advise` marks P")
    return it.name


class HyperPodGroupConfig(StrictModel):
    """A HyperPod instance group that is not a worker group: the Slurm controller or the login nodes."""

    instance_type: str = "m7i.xlarge"
    """EC2 or `ml.` name of a type HyperPod offers (a CPU type is fine here)."""
    count: int = Field(default=1, ge=1, le=HYPERPOD_MAX_INSTANCES)
    volume_gib: int = Field(default=200, ge=1, le=16384)
    """Extra EBS volume, mounted by HyperPod at /opt/sagemaker (logs, containers)."""

    @field_validator("instance_type")
    @classmethod
    def _offered(cls, value: str) -> str:
        return _hyperpod_type(value)


class HyperPodConfig(StrictModel):
    """`training.hyperpod`: the HyperPod cluster around the worker groups (`training.node_groups`)."""

    controller: HyperPodGroupConfig = Field(default_factory=HyperPodGroupConfig)
    """The Slurm controller group (exactly one node: slurmctld and the accounting database); hyperpod-slurm only."""
    login: HyperPodGroupConfig | None = None
    """Optional login nodes users SSH into (through SSM) to submit jobs; omit for none; hyperpod-slurm only."""
    eks_dependencies_installed: bool | None = None
    """Retired (hyperpod-eks used to take two deploys): the deploy now installs the HyperPod dependencies Helm chart
    itself before the HyperPod cluster is created. Any value is rejected with that message."""
    threads_per_core: Literal[1, 2] = 1
    """Worker groups: 1 turns SMT off (the usual choice for tightly coupled training), 2 keeps it."""
    worker_volume_gib: int = Field(default=500, ge=1, le=16384)
    """Extra EBS volume per worker at /opt/sagemaker (container images, checkpoints staging)."""
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    """`Automatic`: HyperPod replaces or reboots a node that fails a health check; `None`: it only labels it."""
    deep_health_checks: bool = True
    """Run `InstanceStress` (and `InstanceConnectivity` on EFA groups) before a GPU/Trainium worker joins."""
    training_plan_arn: str | None = None
    """SageMaker training plan (reserved capacity) for the worker groups; omit for on-demand."""
    lifecycle_scripts: str | None = None
    """Directory of your own lifecycle scripts (absolute, or relative to where mlstack runs); default: mlstack's."""
    on_create: str = "on_create.sh"
    """Entry script, relative to the lifecycle scripts directory (HyperPod runs it once on every new node)."""
    volume_key: Literal["customer_managed", "aws_owned"] | None = None
    """Encryption of the nodes' extra EBS volumes: `customer_managed` (the project key) needs HyperPod's continuous
    node provisioning, which the SageMaker API offers only for EKS-orchestrated clusters; default: customer_managed
    on hyperpod-eks (with NodeProvisioningMode Continuous), aws_owned (HyperPod's own key) on hyperpod-slurm."""

    @field_validator("training_plan_arn")
    @classmethod
    def _plan_arn(cls, value: str | None) -> str | None:
        if value is not None and not _TRAINING_PLAN_ARN.match(value):
            raise ValueError(
                f"{value!r} is not a SageMaker training plan ARN; use "
                "arn:aws:sagemaker:us-east-1:123456789012:training-plan/name"
            )
        return value

    @property
    def scripts_dir(self) -> Path:
        return Path(self.lifecycle_scripts) if self.lifecycle_scripts else LIFECYCLE_SCRIPTS_DIR

    def customer_volume_key(self, engine: str) -> bool:
        """Whether the volumes use the project key (and the cluster continuous node provisioning)."""
        return (self.volume_key or ("customer_managed" if engine == "hyperpod-eks" else "aws_owned")) == (
            "customer_managed"
        )

    def scripts_dir_for(self, engine: str) -> Path:
        """The lifecycle scripts of `engine`: the blueprint's own directory, else mlstack's for that engine."""
        if self.lifecycle_scripts or engine != "hyperpod-eks":
            return self.scripts_dir
        return EKS_LIFECYCLE_SCRIPTS_DIR


class BatchConfig(StrictModel):
    """`training.batch`: the AWS Batch job queue, multi-node job definition and its logs."""

    log_retention_days: int = 90
    """Retention of the job log group (KMS-encrypted with the project key); a CloudWatch Logs retention period."""
    shared_memory_mib: int = Field(default=49152, ge=64)
    """/dev/shm size of the container (NCCL and data loaders use it)."""
    job_queue_priority: int = Field(default=1, ge=0, le=1000)
    name: str = Field(default="train", pattern=_GROUP_NAME)
    """Suffix of the job queue and job definition names."""
    update_job_timeout_minutes: int = Field(default=7200, ge=1, le=7200)
    """How long a launch-template, AMI or user-data update of the compute environment lets a running job go on
    before Batch replaces its instances (the compute environment's UpdatePolicy; 7200, five days, is the most the
    Batch API allows, and jobs are never terminated at the start of the update)."""

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            allowed = ", ".join(str(v) for v in LOG_RETENTION_DAYS)
            raise ValueError(f"log_retention_days must be a CloudWatch Logs retention period ({allowed}), got {value}")
        return value
