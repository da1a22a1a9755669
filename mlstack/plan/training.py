"""The training part of `mlstack plan`: nodes, accelerators, EFA, storage, $/h, quotas, model-fit warnings.

Imports no CDK: `mlstack plan` answers without starting jsii/Node.
"""

from __future__ import annotations

from mlstack.catalog import InstanceType, efa_interface_count, efa_layout
from mlstack.catalog.prices import Service
from mlstack.catalog.quotes import FSX_UNPRICED, eks_control_plane_quote, instance_quote, unpriced
from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.design.footprint.training import device_plugin_charts
from mlstack.design.training import ADMIN_HOST_TYPE, cluster_name, memory_warnings
from mlstack.k8s.disruption import JOB_BUDGET
from mlstack.k8s.image import JOB_CONFIGMAP, first_job_command, image_rows
from mlstack.k8s.job import render_job_yaml
from mlstack.k8s.kube import UPDATE_STRATEGY
from mlstack.plan.model import HOURS_PER_MONTH, Cost, Plan, Quota, Resource
from mlstack.plan.network import cluster_egress_rows
from mlstack.plan.training_elastic import plan_elastic

STACK = "TrainingClusterStack"
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
    region = config.env.region
    if cluster.admin_host:
        plan.resources.append(Resource(stack, "Admin host", f"{ADMIN_HOST_TYPE}, private subnet, SSM only", 1))
        plan.costs.append(Cost(f"{ADMIN_HOST_TYPE} cluster admin host", 1, *instance_quote(ADMIN_HOST_TYPE, region)))
    system = training.system_node_group
    plan.resources.append(
        Resource(stack, "System node group", f"{system.instance_type}, desired {system.desired_size}", 1)
    )
    plan.costs.append(Cost("EKS control plane", 1, *eks_control_plane_quote(cluster.support_type, region)))
    sys_it = system.instance
    system_quote = instance_quote(sys_it.name, region)
    plan.costs.append(Cost(f"{system.instance_type} system nodes (desired)", system.desired_size, *system_quote))

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
        label = {
            "on_demand": "on-demand",
            "spot": "Spot (market price, not known offline)",
            "capacity_reservation": "ODCR, billed at on-demand rate while reserved",
            "capacity_block": "Capacity Block, effective hourly rate of the prepaid reservation fee",
        }[group.capacity.type]
        item = f"{it.name} {group.name} (desired {group.desired_size}, {label})"
        service: Service = "capacity_block" if group.capacity.type == "capacity_block" else "ec2_on_demand"
        quote = (
            unpriced("Spot is billed at the market price, not known offline")
            if group.capacity.type == "spot"
            else instance_quote(it.name, region, service)
        )
        cost = Cost(item, group.desired_size, *quote)
        plan.costs.append(cost)
        price = cost.unit_per_hour
        if group.desired_size < group.max_size and price is not None:
            at_max = price * group.max_size
            plan.warnings.append(
                f"node group {group.name!r} at max_size {group.max_size} would cost ${at_max:,.2f}/hour "
                f"(${at_max * HOURS_PER_MONTH:,.0f}/month) at the catalog's dated rate"
            )
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
        plan.costs.append(Cost(f"FSx for Lustre {fsx.storage_capacity_gib} GiB", 1, *unpriced(FSX_UNPRICED)))
    charts = [*device_plugin_charts(training), "Kubeflow Trainer"]
    plan.resources.append(Resource(stack, "Helm charts", ", ".join(charts), len(charts)))
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
