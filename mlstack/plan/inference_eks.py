"""The `inference: {engine: eks}` part of `mlstack plan`: the serving cluster's resources by CloudFormation type,
$/h at the minimum and maximum fleet, output tokens/s and $ per million output tokens per endpoint, quotas.

Imports no CDK. The sizing is `mlstack.design.serving_eks`; the resource list is its `stack_parts`, also the
stack's footprint (tests/plan/test_footprint.py holds it equal to the synthesized template).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlstack.catalog import get_instance
from mlstack.catalog.memory import GIB, precision_bytes
from mlstack.catalog.quotes import eks_control_plane_quote, instance_quote, unpriced
from mlstack.config import BlueprintConfig
from mlstack.design.serving import ServingFigures, measured_figures, usd_per_million
from mlstack.design.serving_eks import PORT, api_service_name, server_designs, serving_cluster_name, stack_parts
from mlstack.plan.inference_eks_pools import drain_rows, plan_serving_pools, pool_cost_row
from mlstack.plan.model import Cost, Plan, Quota, Resource
from mlstack.plan.serving import figure_row
from mlstack.plan.training import ON_DEMAND_QUOTAS, quota_family

STACK = "InferenceStack"
ADMIN_HOST_TYPE = "m7i.large"
NLB_UNPRICED = (
    "no dated Network Load Balancer rate in the catalog (hours and NLCUs; Elastic Load Balancing pricing page)"
)


def _ec2_cost(item: str, instance: str, quantity: float, region: str) -> Cost:
    return Cost(item, quantity, *instance_quote(instance, region))


def plan_inference_eks(config: BlueprintConfig, plan: Plan, serve_checks: Mapping[str, Path] | None = None) -> None:
    eks = config.inference_eks
    if eks is None:
        return
    checks = serve_checks or {}
    for part in stack_parts(eks):
        if part.count:
            plan.resources.append(Resource(STACK, part.cfn_type, part.what, part.count, part.cfn_type))
    pool_rows = plan_serving_pools(config, plan)
    pooled = bool(pool_rows)
    designs = server_designs(eks)
    cluster = eks.cluster
    region = config.env.region
    plan.costs.append(Cost("EKS control plane", 1, *eks_control_plane_quote(cluster.support_type, region)))
    system = eks.system_node_group
    plan.costs.append(
        _ec2_cost(f"{system.instance_type} system nodes (desired)", system.instance_type, system.desired_size, region)
    )
    if cluster.admin_host:
        plan.costs.append(_ec2_cost(f"{ADMIN_HOST_TYPE} cluster admin host", ADMIN_HOST_TYPE, 1, region))
    model = eks.model
    weights_gib = model.parameters_billion * 1e9 * precision_bytes(model.precision) / GIB
    rows = [
        f"cluster {serving_cluster_name(config.name)}: Kubernetes {cluster.kubernetes_version}, "
        f"{'private' if cluster.endpoint_access == 'private' else 'public+private'} API endpoint",
        f"model {model.name}: {model.parameters_billion:g}B at {model.precision}, weights from "
        f"s3://<model-bucket>/{model.weights_prefix} (Mountpoint for S3, read-only, node-local cache)",
        f"image: {eks.image.reference(config.env.region)}",
        "API key: Secrets Manager (project key), read by each server at start into VLLM_API_KEY; clients send "
        "Authorization: Bearer <key> (output ApiKeySecretArn)",
    ]
    if any(d.accelerator == "neuron" for d in designs):
        rows.append(f"Neuron image (inf2/trn1 endpoints): {eks.image.reference(region, neuron=True)} (ECR Public)")
    sections: list[tuple[str, list[str]]] = [("Inference on EKS (vLLM)", rows)]
    figures_json: list[dict[str, Any]] = []
    vcpus: dict[str, int] = {}
    for design in designs:
        spec = next(e for e in eks.endpoints if e.name == design.endpoint)
        neuron = design.accelerator == "neuron"
        report = checks.get(design.endpoint)
        figures: ServingFigures | None = measured_figures(report) if report is not None else design.figures
        node_hourly = instance_quote(design.instance_type, region).usd
        # A server over several nodes bills all of them: its tokens are priced at that many nodes' rate.
        hourly = None if node_hourly is None else node_hourly * design.pipeline_parallel
        plan.costs.append(
            _ec2_cost(
                f"{design.instance_type} {design.endpoint} nodes (min)", design.instance_type, design.min_nodes, region
            )
        )
        plan.costs.append(Cost(f"{design.endpoint} internal NLB (hours; LCUs extra)", 1, *unpriced(NLB_UNPRICED)))
        erows = [
            f"{design.instance_type} ({design.gpus_per_node} {'Neuron chip' if neuron else 'GPU'}(s) x "
            f"{design.gpu_gib:g} GiB): "
            + (
                f"one vLLM server over {design.pipeline_parallel} nodes (LeaderWorkerSet, EFA) at "
                f"--tensor-parallel-size {design.tensor_parallel} --pipeline-parallel-size {design.pipeline_parallel}"
                if design.pipeline_parallel > 1
                else f"{design.servers_per_node} vLLM server(s) per node at --tensor-parallel-size "
                f"{design.tensor_parallel}" + (" (NeuronCores; Neuron vLLM image)" if neuron else "")
            )
            + ("" if spec.tensor_parallel else " (the advisor's degree)"),
            f"flags: --max-model-len {design.max_model_len} --max-num-seqs {design.max_num_seqs} "
            + (
                f"--num-gpu-blocks-override {design.max_num_seqs} (memory model: "
                f"{design.need_gib_per_gpu:,.1f} GiB of weights + KV cache per chip; compiled at first start)"
                if neuron
                else f"--gpu-memory-utilization {design.gpu_memory_utilization:.2f} (memory model: "
                f"{design.need_gib_per_gpu:,.1f} GiB of weights + KV cache per GPU)"
            ),
            f"replicas {design.min_replicas}..{design.max_replicas} (KEDA: one more per "
            f"{design.target_requests_waiting:g} requests waiting, vllm:num_requests_waiting summed over the "
            f"servers, and no fewer than the running requests fill at --max-num-seqs); nodes "
            + (
                f"{design.min_nodes}..{design.max_nodes} (Karpenter)"
                if pooled
                else f"{design.min_nodes}, fixed (a node group: max_replicas is at most what they hold)"
            ),
            f"internal NLB of Service {api_service_name(design.endpoint)} (created by Kubernetes, not "
            f"CloudFormation) on port {PORT}, VPC CIDR only",
            figure_row(design.endpoint, figures, hourly, "EC2 on-demand"),
        ]
        erows += pool_rows.get(design.endpoint, [])
        cost = pool_cost_row(design, node_hourly, pooled)
        if cost is not None:
            erows.append(cost)
        hours = spec.autoscaling.active_hours
        if hours is not None:
            erows.append(
                f"scale to zero: {hours.replicas} server(s) from '{hours.start}' to '{hours.end}' ({hours.timezone}, "
                "KEDA cron), none outside once no request runs or waits for 10 min; a request at zero is refused"
            )
        erows += drain_rows(design, weights_gib, pooled)
        sections.append((f"Endpoint {design.endpoint} (eks)", erows))
        it = get_instance(design.instance_type)
        family = quota_family(it)
        vcpus[family] = vcpus.get(family, 0) + it.vcpus * design.max_nodes
        figures_json.append(
            {
                "endpoint": design.endpoint,
                "instance_type": design.instance_type,
                "tensor_parallel": design.tensor_parallel,
                "pipeline_parallel": design.pipeline_parallel,
                "accelerator": design.accelerator,
                "servers_per_node": design.servers_per_node,
                "max_model_len": design.max_model_len,
                "gpu_memory_utilization": design.gpu_memory_utilization,
                "nodes": [design.min_nodes, design.max_nodes],
                "per_hour_min": None if node_hourly is None else round(node_hourly * design.min_nodes, 4),
                "per_hour_max": None if node_hourly is None else round(node_hourly * design.max_nodes, 4),
                "node_autoscaler": "karpenter" if pooled else None,
                "serving": {} if figures is None else figures.to_json(hourly),
            }
        )
    for family, count in vcpus.items():  # one On-Demand quota per instance family (G and VT, P, Inf, Trn)
        name, code = ON_DEMAND_QUOTAS[family]
        plan.quotas.append(Quota("ec2", name, code, count, "vCPUs at max nodes"))
    plan.warnings.append(
        "the NLB of each endpoint Service is created by Kubernetes, outside CloudFormation: delete the Services "
        "(kubectl delete svc -n " + eks.namespace + " --all) before deleting the InferenceStack, or the load "
        "balancer and its network interfaces stay and block the VPC's deletion"
    )
    plan.details.setdefault("sections", []).extend(sections)
    plan.details["inference_eks"] = figures_json


__all__ = ["STACK", "plan_inference_eks", "usd_per_million"]
