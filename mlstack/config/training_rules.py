"""The cross-field rules of `training:` that depend on its engine and its example job: `training_problems` gives
every broken one, one line each (the blueprint reports them all in one run with the other sections' rules).

Apart from `training.py` so the engine and job models it reads (`training_engines.py`, `training_job.py`) never
import `TrainingConfig`: the schema modules form no import circle.
"""

from __future__ import annotations

from typing import get_args

from mlstack.config.training import TrainingConfig
from mlstack.config.training_cluster import HYPERPOD_KUBERNETES_VERSIONS, KubernetesVersion
from mlstack.config.training_elastic_rules import elastic_problems, elastic_zone_problems
from mlstack.config.training_engines import EKS_ENGINES, HYPERPOD_ENGINES, HyperPodConfig
from mlstack.config.training_job import HYPERPOD_JOB_NAMESPACE, SHIPPED_SCRIPT, hyperpod_namespace, stock_image

__all__ = ["engine_problems", "engine_zone_problems", "job_problems", "training_problems"]


def training_problems(training: TrainingConfig, zones: list[str]) -> list[str]:
    """Every engine, job, elastic-capacity and zone problem of `training` (empty when fine)."""
    return (
        engine_problems(training)
        + job_problems(training)
        + elastic_problems(training)
        + engine_zone_problems(training, zones)
        + elastic_zone_problems(training, zones)
    )


def engine_problems(training: TrainingConfig) -> list[str]:
    """Rules that depend only on the training section: one line each, empty when fine."""
    engine = training.engine
    problems: list[str] = []
    given = training.model_fields_set
    owners = (("cluster", EKS_ENGINES), ("system_node_group", EKS_ENGINES), ("hyperpod", HYPERPOD_ENGINES))
    for key, engines in owners:
        if key in given and engine not in engines and getattr(training, key) is not None:
            problems.append(
                f"training.{key} is used by engine {' or '.join(engines)}, not {engine}; remove it or set engine: "
                f"{engines[0]}"
            )
    if "batch" in given and engine != "batch" and training.batch is not None:
        problems.append(f"training.batch is used by engine batch, not {engine}; remove it or set engine: batch")
    if engine in HYPERPOD_ENGINES:
        problems += _hyperpod_problems(training)
    elif engine == "batch":
        problems += _batch_problems(training)
    return problems


def engine_zone_problems(training: TrainingConfig, zones: list[str]) -> list[str]:
    """HyperPod and Batch put every group in one subnet (one VpcConfig / one compute environment)."""
    if training.engine == "eks":
        return []
    used = sorted({z for g in training.node_groups for z in training.zones_of(g, zones)})
    if len(used) > 1:
        return [
            f"training.node_groups: engine {training.engine} runs every group in one subnet, got AZs "
            f"{', '.join(used)}; list one availability_zone for all groups"
        ]
    return []


def _hyperpod_problems(training: TrainingConfig) -> list[str]:
    problems: list[str] = []
    for i, group in enumerate(training.node_groups):
        it = group.instance
        where = f"training.node_groups.{i}"
        if not it.sagemaker_hyperpod or it.accelerator is None or it.accelerator.kind == "inferentia":
            problems.append(
                f"{where}.instance_type: HyperPod workers must be GPU or Trainium types HyperPod offers, got "
                f"{it.name}; "
                "pick e.g. p5.48xlarge, p4d.24xlarge or trn1.32xlarge"
            )
        if group.capacity.type != "on_demand":
            problems.append(
                f"{where}.capacity: HyperPod takes no EC2 {group.capacity.type}; remove capacity and set "
                "training.hyperpod.training_plan_arn for reserved capacity"
            )
        if group.placement_group:
            problems.append(f"{where}.placement_group: HyperPod places instances itself; remove placement_group")
    hyperpod = training.hyperpod or HyperPodConfig()
    if hyperpod.eks_dependencies_installed is not None:
        problems.append(
            "training.hyperpod.eks_dependencies_installed: one `cdk deploy` now installs the HyperPod dependencies "
            "Helm chart before the HyperPod cluster; remove the key"
        )
    if training.engine == "hyperpod-eks":
        set_keys = hyperpod.model_fields_set & {"controller", "login"}
        problems += [
            f"training.hyperpod.{key}: engine hyperpod-eks has no Slurm {key} group (EKS schedules the pods); remove it"
            for key in sorted(set_keys)
        ]
        version = training.cluster.kubernetes_version
        if version not in HYPERPOD_KUBERNETES_VERSIONS:
            supported = [v for v in HYPERPOD_KUBERNETES_VERSIONS if v in get_args(KubernetesVersion)]
            problems.append(
                f"training.cluster.kubernetes_version: SageMaker HyperPod does not support Kubernetes {version} for an "
                f"EKS orchestrator (it supports {HYPERPOD_KUBERNETES_VERSIONS[0]} to "
                f"{HYPERPOD_KUBERNETES_VERSIONS[-1]}); use {' or '.join(supported)}"
            )
        else:
            following = f"1.{int(version.split('.')[1]) + 1}"
            if training.cluster.support_type == "STANDARD" and following not in HYPERPOD_KUBERNETES_VERSIONS:
                # EKS upgrades a STANDARD cluster to the next minor version when standard support ends (EKS User
                # Guide, "Cluster upgrade policy"); HyperPod would then run on a version it does not support.
                problems.append(
                    f"training.cluster.support_type: STANDARD lets EKS upgrade the control plane to Kubernetes "
                    f"{following} when standard support for {version} ends, and SageMaker HyperPod does not support "
                    f"{following}; set support_type: EXTENDED (billed per cluster-hour) until HyperPod lists it"
                )
    elif hyperpod.volume_key == "customer_managed":
        problems.append(
            "training.hyperpod.volume_key: customer_managed needs continuous node provisioning, which HyperPod offers "
            "only for EKS-orchestrated clusters (SageMaker CreateCluster, NodeProvisioningMode); remove it (an AWS "
            "owned key encrypts the volumes) or use engine hyperpod-eks"
        )
    elif hyperpod.controller.count != 1:
        problems.append(
            f"training.hyperpod.controller.count: Slurm has one controller node here, got {hyperpod.controller.count}; "
            "set 1 (HyperPod replaces a failed controller)"
        )
    scripts = hyperpod.scripts_dir_for(training.engine)
    if not (scripts / hyperpod.on_create).is_file():
        listed = ", ".join(sorted(p.name for p in scripts.glob("*.sh"))) if scripts.is_dir() else "directory missing"
        problems.append(
            f"training.hyperpod.on_create: {hyperpod.on_create!r} is not in the lifecycle scripts {scripts} "
            f"({listed}); name a script that exists there"
        )
    names = [g.name for g in training.node_groups]
    for reserved in ("controller", "login"):
        if reserved in names:
            problems.append(
                f"training.node_groups: {reserved!r} is the HyperPod {reserved} group's name; rename the node group"
            )
    return problems


def _batch_problems(training: TrainingConfig) -> list[str]:
    problems: list[str] = []
    if len(training.node_groups) != 1:
        problems.append(
            f"training.node_groups: engine batch runs one multi-node job definition on one instance type, got "
            f"{len(training.node_groups)} groups; keep one"
        )
    for i, group in enumerate(training.node_groups):
        it = group.instance
        if it.accelerator is None or it.accelerator.kind != "gpu":
            problems.append(
                f"training.node_groups.{i}.instance_type: engine batch runs on the ECS GPU AMI (NVIDIA types), got "
                f"{it.name}; pick e.g. p5.48xlarge or p4d.24xlarge, or use engine eks for Trainium"
            )
        if group.capacity.type == "spot":
            problems.append(
                f"training.node_groups.{i}.capacity: AWS Batch multi-node parallel jobs do not run on Spot compute "
                "environments; use on_demand, capacity_reservation or capacity_block"
            )
    return problems


def job_problems(training: TrainingConfig) -> list[str]:
    """One line per problem of `training.job` (empty when fine)."""
    job = training.job
    group = training.job_group
    accel = group.instance.accelerator
    neuron = accel is not None and accel.kind != "gpu"
    problems: list[str] = []
    if neuron and job.script == SHIPPED_SCRIPT:
        problems.append(
            f"training.job.script: the shipped reference script {SHIPPED_SCRIPT} runs on CUDA (NCCL) or CPU (gloo), "
            f"not on Neuron ({group.instance_type} in node group {group.name!r}); set training.job.script to your "
            "torch-neuronx script and training.job.image to a Neuron image that holds it (built FROM the Neuron Deep "
            "Learning Container pytorch-training-neuronx)"
        )
    elif neuron and job.image is None:
        problems.append(
            f"training.job.image: not set, so the deploy would build runtime/containers/train.Dockerfile, a CUDA "
            f"image that cannot drive the Neuron devices of {group.instance_type}; set a Neuron training image (e.g. "
            "the Neuron Deep Learning Container pytorch-training-neuronx, or your build FROM it)"
        )
    elif job.image is not None and job.script == SHIPPED_SCRIPT and stock_image(job.image):
        problems.append(
            f"training.job.image: {job.image!r} is a stock image without the shipped script {SHIPPED_SCRIPT} or "
            "DeepSpeed; remove training.job.image so the deploy builds runtime/containers/train.Dockerfile, or set "
            "training.job.script to a script your image holds"
        )
    if training.engine == "hyperpod-eks" and not hyperpod_namespace(job.namespace):
        problems.append(
            f"training.job.namespace: {job.namespace!r} is outside the namespaces HyperPod job auto-resume watches "
            f"(kubeflow, or a name starting with hyperpod); use {HYPERPOD_JOB_NAMESPACE!r} (the default on "
            "hyperpod-eks)"
        )
    return problems
