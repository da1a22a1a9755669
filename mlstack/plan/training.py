"""The training part of `mlstack plan`: nodes, accelerators, EFA, storage, $/h, quotas, model-fit warnings.

Imports no CDK: `mlstack plan` answers without starting jsii/Node.
"""

from __future__ import annotations

import datetime as dt

from mlstack.catalog import InstanceType, efa_interface_count, efa_layout
from mlstack.catalog.fit import DEFAULT_SEQ_LEN, training_fit
from mlstack.catalog.memory import GIB
from mlstack.catalog.prices import MAX_PRICE_AGE_DAYS, DatedPrice, oldest, stale
from mlstack.catalog.prices import price as ec2_price
from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig, TrainingConfig
from mlstack.k8s.disruption import JOB_BUDGET
from mlstack.k8s.image import JOB_CONFIGMAP, first_job_command, image_rows
from mlstack.k8s.job import render_job_yaml
from mlstack.k8s.kube import UPDATE_STRATEGY
from mlstack.plan.model import HOURS_PER_MONTH, Cost, Plan, Quota, Resource
from mlstack.plan.network import cluster_egress_rows
from mlstack.plan.training_elastic import plan_elastic

STACK = "TrainingClusterStack"
ADMIN_HOST_TYPE = "m7i.large"
"""Instance type of the cluster admin host (kubectl only)."""


def cluster_name(config: BlueprintConfig) -> str:
    """The EKS cluster name: fixed, so the control-plane log group (named after it) can exist before the cluster."""
    return f"{config.name}-cluster"


# --------------------------------------------------------------------------------------------------- memory fit


def memory_warnings(training: TrainingConfig) -> list[str]:
    """A warning per node group the blueprint's model does not fit, by `mlstack.catalog.fit.training_fit`: the
    estimate and rule `mlstack advise train` applies, for the data-parallel (FSDP / ZeRO) job the plan renders."""
    if training.model is None:
        return []
    model = training.model
    warnings: list[str] = []
    for group in training.node_groups:
        it = group.instance
        if it.accelerator is None:
            continue
        # The job shards the model over its own nodes (job.nodes), other groups over all they may run (max_size).
        nodes = group.max_size
        if group.name == training.job_group.name and training.job.nodes is not None:
            nodes = training.job.nodes
        devices = it.accelerator.count * max(1, nodes)
        fit = training_fit(
            model.params,
            devices,
            device_memory_gib=it.accelerator.memory_gib,
            precision=model.precision,
            zero_stage=model.zero_stage,
        )
        if not fit.fits:
            memory = fit.memory
            warnings.append(
                f"node group {group.name!r}: a {model.params / 1e9:g}B-parameter model ({model.precision}, ZeRO "
                f"stage {model.zero_stage}) needs {fit.need_gib:,.1f} GiB per accelerator across {devices} devices "
                f"(model states {memory.states.total_bytes / GIB:,.1f}, activations at sequence length "
                f"{DEFAULT_SEQ_LEN} {memory.activations_bytes / GIB:,.1f}, gathered weights "
                f"{memory.gather_bytes / GIB:,.1f}), more than the {fit.usable_gib:,.1f} GiB usable "
                f"({1 - fit.headroom:.0%}) of the {fit.device_memory_gib:g} GiB of a {it.accelerator.model}; use "
                "more nodes, a higher ZeRO stage, or a larger instance (`mlstack advise train` also tries tensor "
                "and pipeline parallelism)"
            )
    return warnings


# --------------------------------------------------------------------------------------------------- plan

# Service Quotas codes, EC2 "Running On-Demand ... instances" (vCPU-based). Codes as listed by the Service Quotas
# ListServiceQuotas API for service code ec2; cross-checked with public code found through the search tool
# (e.g. a Go quota map {"p": L-417A185B, "trn": L-2C3B7624, "inf": L-1945791B, "g": L-DB2E81BA} and README tables).
ON_DEMAND_QUOTAS: dict[str, tuple[str, str]] = {
    "p": ("Running On-Demand P instances", "L-417A185B"),
    "g": ("Running On-Demand G and VT instances", "L-DB2E81BA"),
    "trn": ("Running On-Demand Trn instances", "L-2C3B7624"),
    "inf": ("Running On-Demand Inf instances", "L-1945791B"),
    "standard": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "L-1216C47A"),
}
# Spot quotas (vCPU): same sources.
SPOT_QUOTAS: dict[str, tuple[str, str]] = {
    "p": ("All P4, P3 and P2 Spot Instance Requests", "L-7212CCBC"),
    "g": ("All G and VT Spot Instance Requests", "L-3819A6DF"),
    "trn": ("All Trn Spot Instance Requests", "L-6B0D517C"),
    "standard": ("All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", "L-34B43A08"),
}

# FSx for Lustre list prices, us-east-1, $/GiB-month, from the FSx for Lustre pricing page as remembered; not
# re-verified offline (PERSISTENT_2 SSD by throughput tier; SCRATCH_2). Shown with no price date.
FSX_PRICE_PER_GIB_MONTH: dict[int | None, float] = {125: 0.145, 250: 0.21, 500: 0.34, 1000: 0.6, None: 0.14}
FSX_PRICE_SOURCE = (
    "Amazon FSx for Lustre pricing page, us-east-1 SSD list prices as remembered, not re-verified offline"
)
EKS_CLUSTER_PER_HOUR = 0.10
EKS_EXTENDED_PER_HOUR = 0.60
EKS_PRICE_SOURCE = (
    "Amazon EKS pricing page: $0.10 per cluster-hour (standard support), $0.60 once a version is in extended support "
    "(support_type EXTENDED), not re-verified offline"
)


def control_plane_per_hour(support_type: str) -> float:
    """$/h of the EKS control plane: the extended-support rate is what an EXTENDED cluster is billed once its version
    leaves standard support (the plan assumes it has, the worst case)."""
    return EKS_EXTENDED_PER_HOUR if support_type == "EXTENDED" else EKS_CLUSTER_PER_HOUR


def quota_family(it: InstanceType) -> str:
    family = it.family
    for prefix in ("trn", "inf", "p", "g"):
        if family.startswith(prefix):
            return prefix
    return "standard"


def _efa_summary(group: NodeGroupConfig) -> tuple[int, int, int]:
    """(EFA interfaces, efa-with-IP interfaces, IP addresses used by interfaces) per node."""
    if not group.efa:
        return 0, 0, 1
    layout = efa_layout(group.instance_type, efa_on_every_card=group.efa_on_every_card)
    efa = efa_interface_count(group.instance_type)
    # An EFA "with an IP" is type `efa`; a plain ENA (`interface`, P6-B300 card 0) has an IP but is no EFA.
    efa_with_ip = sum(1 for nic in layout if nic.is_efa and nic.interface_type != "efa-only")
    ips = sum(1 for nic in layout if nic.interface_type != "efa-only")
    return efa, efa_with_ip, ips


def plan_training(config: BlueprintConfig, plan: Plan) -> None:
    training = config.training
    if training is None:
        return
    zones = config.zones
    stack = STACK
    cluster = training.cluster
    endpoint = "private endpoint" if cluster.endpoint_access == "private" else "public+private endpoint"
    name = cluster_name(config)
    plan.resources.append(
        Resource(
            stack,
            "EKS cluster",
            f"{name}: Kubernetes {cluster.kubernetes_version}, {endpoint}, 5 log types ({cluster.log_retention_days} "
            f"days, KMS), KMS secrets, upgrade policy {cluster.support_type}",
        )
    )
    access_rows = access_path(config)
    used_prices: list[DatedPrice] = []
    if cluster.admin_host:
        plan.resources.append(Resource(stack, "Admin host", f"{ADMIN_HOST_TYPE}, private subnet, SSM only", 1))
        admin_price = ec2_price(ADMIN_HOST_TYPE)
        used_prices += [admin_price] if admin_price is not None else []
        plan.costs.append(
            Cost(
                f"{ADMIN_HOST_TYPE} cluster admin host",
                1,
                None if admin_price is None else admin_price.usd_per_hour,
                None if admin_price is None else admin_price.date,
                _price_source(admin_price),
            )
        )
    system = training.system_node_group
    plan.resources.append(
        Resource(stack, "System node group", f"{system.instance_type}, desired {system.desired_size}", 1)
    )
    plan.costs.append(
        Cost("EKS control plane", 1, control_plane_per_hour(cluster.support_type), None, EKS_PRICE_SOURCE)
    )
    sys_it = system.instance
    sys_price = ec2_price(sys_it.name)
    used_prices += [sys_price] if sys_price is not None else []
    plan.costs.append(
        Cost(
            f"{system.instance_type} system nodes (desired)",
            system.desired_size,
            None if sys_price is None else sys_price.usd_per_hour,
            None if sys_price is None else sys_price.date,
            _price_source(sys_price),
        )
    )

    node_rows: list[str] = []
    accel_rows: list[str] = []
    efa_rows: list[str] = []
    vcpus: dict[tuple[str, str], int] = {}
    _add_vcpus(vcpus, sys_it, "on_demand", system.max_size)
    for group in training.node_groups:
        it = group.instance
        zone = ", ".join(training.zones_of(group, zones))
        capacity = group.capacity.type + (f" {group.capacity.reservation_id}" if group.capacity.reservation_id else "")
        node_rows.append(
            f"{group.name}: {it.name} x desired {group.desired_size} (min {group.min_size}, max {group.max_size}) "
            f"in {zone}; capacity {capacity}; placement group: {'cluster' if group.uses_placement_group else 'none'}"
        )
        if training.capacity_manager != "karpenter":  # else a Karpenter pool (plan.training_elastic)
            plan.resources.append(
                Resource(
                    stack, "Node group", f"{group.name}: {it.name}, desired {group.desired_size}/max {group.max_size}"
                )
            )
            plan.resources.append(Resource(stack, "Launch template", f"{group.name}: IMDSv2, encrypted gp3 root"))
        if it.accelerator is not None:
            acc = it.accelerator
            accel_rows.append(
                f"{group.name}: {acc.describe()} per node = {acc.total_memory_gib:g} GiB; at max_size "
                f"{acc.count * group.max_size} accelerators ({acc.total_memory_gib * group.max_size:g} GiB)"
            )
        efa, with_ip, ips = _efa_summary(group)
        if group.efa:
            efa_rows.append(
                f"{group.name}: {efa} EFA interfaces per node ({with_ip} with an IP, {efa - with_ip} efa-only); "
                f"{it.network_gbps:g} Gbps per node; {ips} interface IP(s) per node"
            )
            if training.capacity_manager != "karpenter":
                plan.resources.append(
                    Resource(stack, "EFA security group", f"{group.name}: all traffic to/from itself")
                )
                if group.uses_placement_group:
                    plan.resources.append(Resource(stack, "Placement group", f"{group.name}: cluster strategy"))
        else:
            efa_rows.append(f"{group.name}: no EFA; {it.network_gbps:g} Gbps ENA")
        dated = ec2_price(it.name)
        price = (
            dated.usd_per_hour
            if dated is not None and group.capacity.type in ("on_demand", "capacity_reservation")
            else None
        )
        if price is not None and dated is not None:
            used_prices.append(dated)
        label = {
            "on_demand": "on-demand",
            "spot": "Spot (market price, not known offline)",
            "capacity_reservation": "ODCR, billed at on-demand rate while reserved",
            "capacity_block": "Capacity Block (prepaid per block; not priced here)",
        }[group.capacity.type]
        plan.costs.append(
            Cost(
                f"{it.name} {group.name} (desired {group.desired_size}, {label})",
                group.desired_size,
                price,
                dated.date if price is not None and dated is not None else None,
                _price_source(dated),
            )
        )
        if group.desired_size < group.max_size and price is not None:
            at_max = price * group.max_size
            plan.warnings.append(
                f"node group {group.name!r} at max_size {group.max_size} would cost ${at_max:,.2f}/hour "
                f"(${at_max * HOURS_PER_MONTH:,.0f}/month) at the catalog's on-demand price"
            )
        if dated is None:
            plan.warnings.append(f"no dated EC2 on-demand price known for {it.name} (not estimated)")
        if group.capacity.type not in ("capacity_block",):
            _add_vcpus(vcpus, it, group.capacity.type, group.max_size)
        if group.efa and it.gpudirect_rdma is False and it.accelerator is not None and it.accelerator.kind == "gpu":
            plan.warnings.append(
                f"node group {group.name!r}: {it.name} has no GPUDirect RDMA: multi-node NCCL over EFA "
                "is much slower than on P-series; fine for pipeline tests, not for large-scale training"
            )

    job_group = training.job_group
    job_nodes = training.job.nodes or job_group.max_size
    if job_nodes > job_group.desired_size and training.capacity_manager != "karpenter":
        plan.warnings.append(
            f"job {training.job.name!r} asks for {job_nodes} node(s) of group {job_group.name!r}, which has "
            f"desired_size {job_group.desired_size} and no node autoscaler: its pods stay Pending until the group "
            f"is scaled: set desired_size: {job_nodes} in the blueprint and deploy (the blueprint is the one way to "
            "scale: a size set with the EKS API or console is reset to the blueprint's by the next deploy)"
        )

    update_rows = [
        f"accelerated node groups: update strategy {UPDATE_STRATEGY} (terminate a node, then launch its replacement, "
        "one at a time): needs no spare capacity, so it works inside an ODCR or Capacity Block",
        "a launch-template or AMI change replaces every node of the group, draining each through the eviction API "
        f"(force update off): the PodDisruptionBudget {JOB_BUDGET!r} in namespace {training.job.namespace!r} refuses "
        "to evict a running job's pods, so the update fails and rolls back while a job runs; deploy between jobs",
        "scaling: desired_size (and min/max) in the blueprint, then deploy; the blueprint is the one way to scale, "
        "since every deploy sets each group to the blueprint's size",
    ]
    for group in training.node_groups:
        if group.capacity.type == "capacity_block":
            update_rows.append(
                f"{group.name}: EC2 starts terminating Capacity Block instances 30 minutes before the block ends; "
                "scale the group to 0 before then (min_size: 0, desired_size: 0 in the blueprint, then deploy) so "
                "jobs checkpoint and stop cleanly"
            )
    sections: list[tuple[str, list[str]]] = [
        ("Access", access_rows),
        ("Updates", update_rows),
        ("Nodes", node_rows),
        ("Accelerators", accel_rows or ["none (CPU only)"]),
        ("EFA and network", efa_rows),
    ]
    if training.fsx is not None:
        fsx = training.fsx
        per_unit = fsx.per_unit_storage_throughput
        fsx_rows = [
            f"{fsx.deployment_type}, {fsx.storage_capacity_gib} GiB ({fsx.capacity_tib:g} TiB as FSx counts it) in "
            f"{training.fsx_zone(zones)}",
            f"throughput {per_unit or 200} MB/s/TiB -> {fsx.throughput_mbps:,.0f} MB/s aggregate baseline",
            f"Lustre 2.15, {fsx.data_compression} compression, KMS project key, retained: {config.retain}",
        ]
        if fsx.data_repository is not None:
            repo = fsx.data_repository
            fsx_rows.append(f"data repository: {repo.s3_path} <-> {repo.file_system_path} (import + export)")
        sections.append(("FSx for Lustre", fsx_rows))
        plan.resources.append(
            Resource(stack, "FSx for Lustre", f"{fsx.deployment_type} {fsx.storage_capacity_gib} GiB, retained")
        )
        monthly = FSX_PRICE_PER_GIB_MONTH[per_unit] * fsx.storage_capacity_gib
        plan.costs.append(
            Cost(f"FSx for Lustre {fsx.storage_capacity_gib} GiB", 1, monthly / HOURS_PER_MONTH, None, FSX_PRICE_SOURCE)
        )
    plan.resources.append(Resource(stack, "Helm charts", "device plugins, EFA device plugin, Kubeflow Trainer"))
    plan.resources.append(
        Resource(stack, "GPU/Neuron metrics", "CloudWatch Container Insights (amazon-cloudwatch-observability add-on)")
    )
    plan.quotas.append(Quota("eks", "Clusters", "L-1194D53C", 1))  # Service Quotas code, eks; seen in public IaC
    for (family, kind), needed in sorted(vcpus.items()):
        table = SPOT_QUOTAS if kind == "spot" else ON_DEMAND_QUOTAS
        if family in table:
            name, code = table[family]
            plan.quotas.append(Quota("ec2", name, code, needed, "vCPU (at max_size)"))
    for group in training.node_groups:
        if group.capacity.is_reservation:
            quota_note = (
                "an ODCR counts against the On-Demand vCPU quota"
                if group.capacity.type == "capacity_reservation"
                else "Capacity Block instances are not counted in the On-Demand quota above"
            )
            plan.warnings.append(
                f"node group {group.name!r} uses {group.capacity.type} {group.capacity.reservation_id}: it must be in "
                f"{training.zone_of(group, zones)} and hold {group.instance_type}; {quota_note}"
            )
    sections += plan_elastic(config, plan)
    sections += job_sections(config)
    plan.details.setdefault("sections", []).extend(sections)
    plan.warnings.extend(memory_warnings(training))
    plan.warnings.extend(price_age_warnings(used_prices, dt.date.today()))


def job_sections(config: BlueprintConfig) -> list[tuple[str, list[str]]]:
    """The example job's image (which, and where it comes from), how it starts, and its manifest (eks and
    hyperpod-eks: the deploy puts this manifest, with the image's URI, in a ConfigMap of the job namespace)."""
    assert config.training is not None
    training = config.training
    start = [
        f"the deploy stores the manifest below, with the image's URI, in ConfigMap {JOB_CONFIGMAP} (namespace "
        f"{training.job.namespace}); once the job's nodes are Ready, on the admin host (stack output FirstJobCommand):",
        first_job_command(training),
    ]
    return [
        ("Job image", image_rows(config)),
        ("First job", start),
        ("Job manifest", render_job_yaml(config).rstrip().splitlines()),
    ]


def access_path(config: BlueprintConfig) -> list[str]:
    """How an admin reaches the cluster's API, one line each (what `mlstack plan` prints under Access)."""
    assert config.training is not None
    cluster = config.training.cluster
    name = cluster_name(config)
    rows: list[str] = []
    if cluster.admin_host:
        rows.append(
            f"admin host ({ADMIN_HOST_TYPE}, SSM Session Manager, cluster-admin access entry): `aws ssm start-session "
            f"--target <instance id>` (stack output AdminHostSessionCommand); kubectl is configured for {name}"
        )
    rows += [f"access entry (cluster admin): {arn}" for arn in cluster.admin_principal_arns]
    if cluster.endpoint_access == "public_and_private":
        rows.append("the API endpoint is also public (IAM-authenticated; labs only)")
    elif cluster.admin_principal_arns:
        rows.append("admin principals need a network path into the VPC (VPN, peering) to reach the private endpoint")
    return rows + cluster_egress_rows(config)


def _add_vcpus(vcpus: dict[tuple[str, str], int], it: InstanceType, capacity: str, count: int) -> None:
    kind = "spot" if capacity == "spot" else "on_demand"
    key = (quota_family(it), kind)
    vcpus[key] = vcpus.get(key, 0) + it.vcpus * count


def _price_source(dated: DatedPrice | None) -> str:
    return "no dated price" if dated is None else dated.source


def price_age_warnings(used: list[DatedPrice], today: dt.date) -> list[str]:
    """The oldest price date the plan used, and a warning per price older than `MAX_PRICE_AGE_DAYS`."""
    first = oldest(used)
    if first is None:
        return []
    out = [f"training prices: oldest price date used {first.date} ({first.instance}, {first.service})"]
    old = sorted({p.instance for p in used if stale(p, today)})
    if old:
        out.append(f"training prices older than {MAX_PRICE_AGE_DAYS} days on {today}: {', '.join(old)}; re-price")
    return out
