"""`TrainingClusterStack`'s resources, per engine: EKS (`TrainingCluster` + node groups), HyperPod on Slurm or on
EKS, AWS Batch; FSx for Lustre and the admin host where the blueprint has them."""

from __future__ import annotations

from collections import Counter

from mlstack.catalog import get_instance
from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.constructs.training.versions import ADDONS
from mlstack.design.footprint.elastic import hyperpod_autoscaling, karpenter, kueue, task_governance
from mlstack.design.footprint.parts import (
    ACCESS_ENTRY,
    EGRESS,
    HELM_CHART,
    INGRESS,
    KUBERNETES_RESOURCE,
    LAUNCH_TEMPLATE,
    LAYER,
    LOG_GROUP,
    SECURITY_GROUP,
    Footprint,
    bucket,
    bucket_deployment,
    efa_networking,
    fsx_lustre,
    function,
    provider_framework,
    role,
)
from mlstack.design.host_metrics import has_host_agent
from mlstack.design.hyperpod_governance import autoscaling, governance
from mlstack.design.karpenter import pools
from mlstack.design.kueue import queues
from mlstack.design.training import node_group_designs

NODEGROUP = "AWS::EKS::Nodegroup"


def training_cluster(*, admin_principals: int, device_plugin_charts: int) -> Footprint:
    """`TrainingCluster` without accelerated node groups: the control plane (role, group, log group), the kubectl
    provider (handler and framework functions, their log groups, the AWS CLI and kubectl layers, the ready
    barrier), the creator's and each admin principal's access entry, the managed add-ons (the VPC CNI's and the
    CloudWatch agent's Pod Identity roles), the system node group, and the Kubeflow Trainer chart plus
    `device_plugin_charts` (NVIDIA, Neuron, EFA: one each for the kinds the node groups need)."""
    return (
        Counter(
            {
                "AWS::EKS::Cluster": 1,
                SECURITY_GROUP: 1,
                LOG_GROUP: 1,
                LAYER: 2,
                "AWS::SSM::Parameter": 1,
                ACCESS_ENTRY: 1 + admin_principals,
                "AWS::EKS::Addon": len(ADDONS),
                "AWS::EKS::PodIdentityAssociation": 1,  # the CloudWatch agent's (the VPC CNI's is on its add-on)
                NODEGROUP: 1,
                HELM_CHART: 1 + device_plugin_charts,
            }
        )
        + role(policy=False)  # cluster role
        + function()  # kubectl handler
        + provider_framework()
        + role(policy=False)  # VPC CNI Pod Identity
        + role(policy=False)  # CloudWatch agent Pod Identity
        + role(policy=False)  # system nodes
    )


def accelerated_node_group(*, efa: bool, placement_group: bool, host_agent: bool = False) -> Footprint:
    """`TrainingCluster.add_accelerated_node_group`: node group, node role, launch template; with EFA its
    `EfaNetworking` (self-referencing closed group, and a cluster placement group when asked); `host_agent`: the
    node role has a policy (the CloudWatch agent's statements)."""
    found = Counter({NODEGROUP: 1, LAUNCH_TEMPLATE: 1}) + role(policy=host_agent)
    if efa:
        found += efa_networking(placement_group=placement_group)
    return found


def admin_host() -> Footprint:
    """`ClusterAdminHost`: instance, IMDSv2 launch template, instance profile, role and policy, its security group
    with HTTPS out to the cluster's two groups (and their ingress from it), and its access entry."""
    return (
        Counter(
            {
                "AWS::EC2::Instance": 1,
                LAUNCH_TEMPLATE: 1,
                "AWS::IAM::InstanceProfile": 1,
                SECURITY_GROUP: 1,
                EGRESS: 2,
                INGRESS: 2,
                ACCESS_ENTRY: 1,
            }
        )
        + role()
    )


def hyperpod_cluster() -> Footprint:
    """`HyperPodCluster`: the cluster, its execution role and policy, the lifecycle-scripts bucket and the
    deployment that fills it."""
    return Counter({"AWS::SageMaker::Cluster": 1}) + role() + bucket() + bucket_deployment()


def hyperpod_dependencies() -> Footprint:
    """`HyperPodDependencies`: the chart installer function in the VPC (own group, HTTPS ingress to the cluster's
    control-plane group, role without inline policy, log group), its access entry, its provider and the custom
    resource."""
    return (
        Counter({"Custom::HyperPodDependencies": 1, SECURITY_GROUP: 1, INGRESS: 1, ACCESS_ENTRY: 1})
        + function(policy=False)
        + provider_framework()
    )


def node_security_group() -> Footprint:
    """`training_hyperpod.node_security_group`: open egress, all traffic from itself."""
    return Counter({SECURITY_GROUP: 1, INGRESS: 1})


def batch_training(*, host_agent: bool = False) -> Footprint:
    """`BatchMultiNodeTraining`: compute environment, queue, job definition, launch template, instance profile,
    instance and job roles, job log group, and the rules it adds to the VPC default group (the job containers'
    group: all TCP from and to itself, HTTPS out). `host_agent`: the instance role has a policy of its own (the
    CloudWatch agent's statements)."""
    return (
        Counter(
            {
                "AWS::Batch::ComputeEnvironment": 1,
                "AWS::Batch::JobQueue": 1,
                "AWS::Batch::JobDefinition": 1,
                LAUNCH_TEMPLATE: 1,
                "AWS::IAM::InstanceProfile": 1,
                LOG_GROUP: 1,
                INGRESS: 1,
                EGRESS: 2,
            }
        )
        + role(policy=host_agent)
        + role(policy=False)
    )


def _fsx(training: TrainingConfig, *, closed: int, open_: int) -> Footprint:
    if training.fsx is None:
        return Counter()
    return fsx_lustre(
        closed_clients=closed, open_clients=open_, data_repository=training.fsx.data_repository is not None
    )


def _job_manifests(training: TrainingConfig, *, disruption_budget: bool) -> Footprint:
    """The manifests of the EKS engines: job namespace, first-job ConfigMap, the job's disruption budget (eks),
    the FSx volume and claim (with FSx)."""
    count = 2 + (1 if disruption_budget else 0) + (1 if training.fsx is not None else 0)
    return Counter({KUBERNETES_RESOURCE: count})


def device_plugin_charts(training: TrainingConfig) -> list[str]:
    """The device-plugin charts `TrainingCluster` installs for the EKS engine's node groups: NVIDIA's for GPU
    groups, Neuron's for Trainium/Inferentia groups, the EFA plugin for EFA groups (one each)."""
    groups = training.node_groups
    kinds = {g.instance.accelerator.kind for g in groups if g.instance.accelerator is not None}
    charts = []
    if "gpu" in kinds:
        charts.append("NVIDIA device plugin")
    if kinds & {"trainium", "inferentia"}:
        charts.append("Neuron device plugin")
    if any(g.efa for g in groups):
        charts.append("EFA device plugin")
    return charts


def _eks(config: BlueprintConfig, training: TrainingConfig) -> Footprint:
    groups = training.node_groups
    found = training_cluster(
        admin_principals=len(training.cluster.admin_principal_arns),
        device_plugin_charts=len(device_plugin_charts(training)),
    )
    elastic = pools(training, config.zones)
    for design in [] if elastic else node_group_designs(config):
        gpu = get_instance(design.instance_type).accelerator
        found += accelerated_node_group(
            efa=design.efa,
            placement_group=design.placement_group,
            host_agent=has_host_agent(training) and gpu is not None and gpu.vendor == "nvidia",
        )
    found += karpenter(elastic, host_agent=has_host_agent(training)) + kueue(queues(training))
    # FSx clients: each EFA group's security group (closed), and the EKS cluster group (open; not in the template)
    # when some node group has no EFA.
    efa_groups = sum(1 for g in groups if g.efa)
    found += _fsx(training, closed=efa_groups, open_=int(any(not g.efa for g in groups)))
    return found + _job_manifests(training, disruption_budget=True)


def _hyperpod_eks(training: TrainingConfig) -> Footprint:
    found = training_cluster(admin_principals=len(training.cluster.admin_principal_arns), device_plugin_charts=0)
    # FSx clients: the EFA group (closed) and the EKS cluster group (open).
    found += efa_networking(placement_group=False) + _fsx(training, closed=1, open_=1)
    found += hyperpod_dependencies() + hyperpod_cluster()
    found += task_governance(governance(training)) + hyperpod_autoscaling(autoscaling(training))
    return found + _job_manifests(training, disruption_budget=False)


def training_stack(config: BlueprintConfig, training: TrainingConfig) -> Footprint:
    """The training stack of `training.engine`."""
    engine = training.engine
    if engine == "eks":
        found = _eks(config, training)
    elif engine == "hyperpod-eks":
        found = _hyperpod_eks(training)
    else:
        # hyperpod-slurm and batch: an EFA group (closed) and the node group (open), both FSx clients.
        first = training.node_groups[0]
        placement = engine == "batch" and first.efa and first.uses_placement_group
        found = efa_networking(placement_group=placement) + node_security_group() + _fsx(training, closed=1, open_=1)
        found += (
            hyperpod_cluster() if engine == "hyperpod-slurm" else batch_training(host_agent=has_host_agent(training))
        )
    if engine in ("eks", "hyperpod-eks") and training.cluster.admin_host:
        found += admin_host()
    return found
