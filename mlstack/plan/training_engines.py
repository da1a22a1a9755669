"""The `mlstack plan` part of the HyperPod (Slurm, EKS) and Batch training engines (`training.engine`).

Imports no CDK. HyperPod bills `ml.*` instances at SageMaker HyperPod rates: priced from the catalog's dated
`hyperpod` rows where it has them (none today), else unknown with the reason, never at the EC2 rate. SageMaker
Service Quotas codes are not in the catalog either: each quota is named and its code shown as 'unknown'.
"""

from __future__ import annotations

from mlstack.catalog import efa_interface_count
from mlstack.catalog.quotes import FSX_UNPRICED, eks_control_plane_quote, instance_quote, unpriced
from mlstack.config import BlueprintConfig
from mlstack.config.training import HYPERPOD_KUBERNETES_VERSIONS, TrainingConfig
from mlstack.config.training_engines import HYPERPOD_ENGINES, BatchConfig, HyperPodConfig
from mlstack.config.training_hyperpod_rules import hyperpod_autoscaling
from mlstack.constructs.training.versions import (
    HYPERPOD_CHART_NAMESPACE,
    HYPERPOD_CHART_PATH,
    HYPERPOD_CHART_RELEASE,
    HYPERPOD_CHART_SHA256,
    HYPERPOD_CLI_COMMIT,
)
from mlstack.design.training import ADMIN_HOST_TYPE, cluster_name, memory_warnings
from mlstack.k8s.image import image_rows
from mlstack.plan.model import Cost, Plan, Quota, Resource
from mlstack.plan.training import (
    ON_DEMAND_QUOTAS,
    access_path,
    job_sections,
    quota_family,
)
from mlstack.plan.training_hyperpod_elastic import plan_hyperpod_elastic

STACK = "TrainingClusterStack"
BATCH_IMAGE_TYPE = "ECS_AL2023_NVIDIA"
ALLOCATION_STRATEGY = "BEST_FIT_PROGRESSIVE"
"""What the Batch stack sets (mlstack.constructs.training.batch defaults; the plan imports no CDK)."""


def plan_training_engine(config: BlueprintConfig, plan: Plan) -> None:
    """The training part of the plan for `training.engine` hyperpod-slurm, hyperpod-eks or batch."""
    training = config.training
    if training is None:
        return
    if training.engine == "hyperpod-eks":
        _plan_eks_control_plane(config, training, plan)
    if training.engine in HYPERPOD_ENGINES:
        _plan_hyperpod(config, training, plan)
    if training.engine == "hyperpod-eks":
        plan.details.setdefault("sections", []).extend(plan_hyperpod_elastic(config, plan))
    elif training.engine == "batch":
        _plan_batch(config, training, plan)
    _plan_fsx(config, training, plan)
    plan.warnings.extend(memory_warnings(training))


def _plan_hyperpod(config: BlueprintConfig, training: TrainingConfig, plan: Plan) -> None:
    hyperpod = training.hyperpod or HyperPodConfig()
    zone = training.zone_of(training.node_groups[0], config.zones)
    slurm = training.engine == "hyperpod-slurm"
    orchestrator = "Slurm via lifecycle scripts" if slurm else f"EKS cluster {cluster_name(config)}"
    if not slurm:
        orchestrator += " (created once the HyperPod Helm chart is installed)"
    plan.resources.append(
        Resource(
            STACK,
            "HyperPod cluster",
            f"{config.name}: {orchestrator}, node recovery {hyperpod.node_recovery}, one subnet in {zone}",
        )
    )
    plan.resources.append(Resource(STACK, "S3 bucket", "sagemaker-* lifecycle scripts, KMS, versioned"))
    plan.resources.append(Resource(STACK, "IAM role", "HyperPod execution role (scripts bucket, ENIs, logs, SSM)"))
    plan.resources.append(Resource(STACK, "EFA security group", "all traffic to/from itself"))
    groups: list[tuple[str, str, int]] = []
    if slurm:
        groups.append(("controller", hyperpod.controller.instance_type, hyperpod.controller.count))
    if slurm and hyperpod.login is not None:
        groups.append(("login", hyperpod.login.instance_type, hyperpod.login.count))
    groups += [(g.name, g.instance_type, g.desired_size) for g in training.node_groups]
    rows: list[str] = []
    counts: dict[str, int] = {}
    for name, instance_type, count in groups:
        ml = f"ml.{instance_type}"
        efa = efa_interface_count(instance_type)
        rows.append(f"{name}: {ml} x {count}" + (f"; {efa} EFA per node (HyperPod attaches them)" if efa else ""))
        plan.resources.append(Resource(STACK, "Instance group", f"{name}: {ml}", count))
        plan.costs.append(Cost(f"{ml} {name} (HyperPod)", count, *instance_quote(ml, config.env.region, "hyperpod")))
        counts[ml] = counts.get(ml, 0) + count
    if hyperpod_autoscaling(training):
        # Autoscaled instance groups start at 0 nodes and grow to max_size: the quota must hold the maximum.
        counts = {}
        for g in training.node_groups:
            counts[f"ml.{g.instance_type}"] = counts.get(f"ml.{g.instance_type}", 0) + g.max_size
    for ml, count in sorted(counts.items()):
        unit = "instances (at max_size)" if hyperpod_autoscaling(training) else "instances"
        plan.quotas.append(Quota("sagemaker", f"{ml} for cluster usage", "unknown", count, unit))
    plan.warnings.append(
        "HyperPod ml.* prices and SageMaker quota codes are not in the catalog: price each instance group on the "
        "SageMaker pricing page and find each quota by its name (e.g. 'ml.p5.48xlarge for cluster usage', not "
        "verified offline) in Service Quotas, service sagemaker"
    )
    checks = "InstanceStress (+ InstanceConnectivity on EFA groups)" if hyperpod.deep_health_checks else "off"
    rows.append(f"deep health checks on accelerated workers: {checks}; threads per core {hyperpod.threads_per_core}")
    if hyperpod.training_plan_arn:
        rows.append(f"workers use training plan {hyperpod.training_plan_arn}")
    if hyperpod.customer_volume_key(training.engine):
        rows.append("extra EBS volumes: project KMS key, continuous node provisioning (execution role may CreateGrant)")
    else:
        rows.append("extra EBS volumes: HyperPod's AWS owned key (a customer key needs continuous provisioning)")
    sections = plan.details.setdefault("sections", [])
    sections.append(("HyperPod instance groups", rows))
    if slurm:
        workers = sum(g.desired_size for g in training.node_groups)
        sections.append(
            (
                "First job (Slurm, on the login or controller node)",
                [
                    "sinfo: every worker idle (slurmd configless, --conf-server <controller>)",
                    f"cd /fsx/mlstack && sbatch --nodes={workers} train.sbatch: runtime/workloads/train.py under "
                    "torchrun on every worker through srun --auto-resume=1, checkpoints in /fsx/checkpoints",
                ],
            )
        )


def _plan_eks_control_plane(config: BlueprintConfig, training: TrainingConfig, plan: Plan) -> None:
    """hyperpod-eks: the EKS side (control plane, system nodes, admin host), the chart step and the EKS job."""
    cluster = training.cluster
    system = training.system_node_group
    plan.resources.append(
        Resource(
            STACK,
            "EKS cluster",
            f"{cluster_name(config)}: Kubernetes {cluster.kubernetes_version}, {cluster.endpoint_access} endpoint, "
            "access entries (authentication mode API, as HyperPod requires)",
        )
    )
    plan.resources.append(
        Resource(STACK, "System node group", f"{system.instance_type}, desired {system.desired_size}", 1)
    )
    region = config.env.region
    plan.costs.append(Cost("EKS control plane", 1, *eks_control_plane_quote(cluster.support_type, region)))
    system_quote = instance_quote(system.instance_type, region)
    plan.costs.append(Cost(f"{system.instance_type} system nodes (desired)", system.desired_size, *system_quote))
    if cluster.admin_host:
        plan.resources.append(Resource(STACK, "Admin host", f"{ADMIN_HOST_TYPE}, private subnet, SSM only", 1))
        plan.costs.append(Cost(f"{ADMIN_HOST_TYPE} cluster admin host", 1, *instance_quote(ADMIN_HOST_TYPE, region)))
    sections = plan.details.setdefault("sections", [])
    sections.append(("Access", access_path(config)))
    plan.resources.append(
        Resource(
            STACK,
            "HyperPod chart installer",
            f"Lambda function in the VPC + custom resource: helm upgrade --install {HYPERPOD_CHART_RELEASE} "
            f"(aws/sagemaker-hyperpod-cli {HYPERPOD_CLI_COMMIT[:7]}, chart digest checked), EKS access entry",
        )
    )
    steps = [
        f"the deploy installs the HyperPod dependencies chart ({HYPERPOD_CHART_PATH} of aws/sagemaker-hyperpod-cli "
        f"at {HYPERPOD_CLI_COMMIT}, SHA-256 of the chart folder {HYPERPOD_CHART_SHA256}) as release "
        f"{HYPERPOD_CHART_RELEASE} in {HYPERPOD_CHART_NAMESPACE}, from a Lambda function in the VPC (egress through "
        "NAT to github.com and the sub-charts' Helm repositories), then creates the HyperPod cluster: one deploy",
        f"Kubernetes {cluster.kubernetes_version}: one of the versions SageMaker HyperPod supports for EKS "
        f"({', '.join(HYPERPOD_KUBERNETES_VERSIONS)}, 'Getting started with Amazon EKS support in SageMaker "
        "HyperPod')",
    ]
    sections.append(("HyperPod on EKS: before the nodes join", steps))
    sections += job_sections(config)


def _plan_batch(config: BlueprintConfig, training: TrainingConfig, plan: Plan) -> None:
    settings = training.batch or BatchConfig()
    group = training.node_groups[0]
    it = group.instance
    nodes = training.job.nodes or group.max_size
    efa = efa_interface_count(it.name)
    placement = "cluster placement group" if group.efa and group.uses_placement_group else "no placement group"
    plan.resources += [
        Resource(
            STACK,
            "Batch compute environment",
            f"managed EC2 {it.name}, 0..{group.max_size} nodes, {placement}, {BATCH_IMAGE_TYPE} AMI, "
            f"{ALLOCATION_STRATEGY} (takes launch-template updates; running jobs keep "
            f"{settings.update_job_timeout_minutes} min before an update replaces their instances)",
        ),
        Resource(STACK, "Launch template", f"{efa} EFA interfaces, IMDSv2 (hop limit 1), encrypted gp3 root"),
        Resource(
            STACK,
            "Security group rules",
            "VPC default group (the interface of every job container): TCP between containers, HTTPS out",
        ),
        Resource(STACK, "Batch job queue", f"priority {settings.job_queue_priority}"),
        Resource(STACK, "Batch job definition", f"multinode, {nodes} nodes, torchrun, {efa} uverbs devices"),
        Resource(STACK, "Log group", f"job logs, {settings.log_retention_days} days, KMS"),
    ]
    # minvCpus 0: no instance runs between jobs, so the standing cost is zero; a job's cost is shown beside it.
    quote = (
        instance_quote(it.name, config.env.region)
        if group.capacity.type in ("on_demand", "capacity_reservation")
        else unpriced(f"capacity {group.capacity.type}: no on-demand hourly rate applies")
    )
    idle = Cost(f"{it.name} {group.name} (idle between jobs)", 0, *quote)
    plan.costs.append(idle)
    price = idle.unit_per_hour
    job_cost = "unknown" if price is None else f"${price * nodes:,.2f}/hour"
    family = quota_family(it)
    if family in ON_DEMAND_QUOTAS and group.capacity.type != "capacity_block":
        name, code = ON_DEMAND_QUOTAS[family]
        plan.quotas.append(Quota("ec2", name, code, it.vcpus * group.max_size, "vCPU (at max_size)"))
    plan.details.setdefault("sections", []).append(
        (
            "Batch",
            [
                f"{group.name}: {it.name}, {efa} EFA per node, {nodes} nodes per job, capacity {group.capacity.type}",
                f"a {nodes}-node job costs {job_cost} while it runs; instances run only while a job does "
                "(minvCpus 0); AWS Batch itself has no charge",
                f"first job: `mlstack acceptance {config.name} --image <nccl-tests image> | bash` runs nccl-tests "
                "over the job's nodes; then `aws batch submit-job --job-queue <output BatchJobQueue> --job-definition "
                "<output BatchJobDefinition> --job-name run1` runs torchrun with training.job.script on every node",
            ],
        )
    )
    plan.details["sections"].append(("Job image", image_rows(config)))


def _plan_fsx(config: BlueprintConfig, training: TrainingConfig, plan: Plan) -> None:
    fsx = training.fsx
    if fsx is None:
        return
    plan.resources.append(Resource(STACK, "FSx for Lustre", f"{fsx.deployment_type} {fsx.storage_capacity_gib} GiB"))
    plan.costs.append(Cost(f"FSx for Lustre {fsx.storage_capacity_gib} GiB", 1, *unpriced(FSX_UNPRICED)))
