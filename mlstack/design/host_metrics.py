"""Per-GPU and EFA metrics from the CloudWatch agent on the engines' GPU hosts (Batch container instances,
HyperPod nodes, EKS managed and Karpenter nodes): its configuration, and the dashboard widgets and alarms on what it
publishes (no CDK import).

- On the Kubernetes engines (eks, hyperpod-eks) the host agent needs no DCGM host engine (the node monitoring
  agent runs the node's only one, which is why the amazon-cloudwatch-observability add-on's DCGM exporter is off):
  it reads nvidia-smi. EFA stays with Container Insights there (`node_efa_*` per node from the add-on's agent), so
  the host agent's configuration has no `efa` section on those engines.

- The agent's `nvidia_gpu` section runs nvidia-smi every minute and publishes `nvidia_smi_<field>` per GPU
  (dimensions `host`, `index`, `name`, ...); CloudWatch User Guide, "Collect NVIDIA GPU metrics",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-NVIDIA-GPU.html.
- Its `efa` section (agent 1.300068.0 and later) publishes `efa_<counter>` deltas per EFA device (dimensions
  `device`, `port`, `eniId`); "Collect EFA metrics",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-EFA.html.
- The agent adds no cluster dimension of its own to EFA metrics (a static `append_dimensions` value exists only for
  its nvidia-smi input), so each blueprint's hosts publish to a namespace of their own, and `aggregation_dimensions`
  `[]` adds one series per metric over the whole cluster: the series the alarms watch. The per-device EFA series
  (32 per p5 node) are dropped (`drop_original_metrics`): only the cluster totals are billed.
- XID and ECC errors: the NVIDIA driver logs every Xid event to the kernel log as `NVRM: Xid (PCI:...): <n>, ...`
  (NVIDIA, "XID Errors", https://docs.nvidia.com/deploy/xid-errors/index.html). The hosts copy the kernel log from
  the journal to a file the agent uploads, and a metric filter counts the lines whose code NVIDIA's catalogue puts
  on the hardware or its driver (`XID_HARDWARE`), not those an application causes (13 graphics engine exception,
  31 MMU fault, 43 GPU stopped processing, 45 preemptive cleanup: a killed or failing CUDA process, which a job
  cancel, timeout or spot reclaim also produces); nvidia-smi's own ECC counters are not in the agent's documented
  field list.
"""

from __future__ import annotations

import json

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.constructs.training.metric_names import (
    Alarm,
    HostAgent,
    Metric,
    Widget,
)

GPU_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-NVIDIA-GPU.html"
EFA_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-EFA.html"
XID_PAGE = "https://docs.nvidia.com/deploy/xid-errors/index.html"
KERNEL_LOG = "/var/log/mlstack/kernel.log"
"""Where the hosts' `mlstack-kernel-log` unit appends the kernel's journal (runtime/host_metrics)."""

GPU_FIELDS = ("utilization_gpu", "utilization_memory", "memory_used", "memory_total", "temperature_gpu", "power_draw")
EFA_COUNTERS = (
    "efa_rx_bytes",
    "efa_tx_bytes",
    "efa_rdma_read_bytes",
    "efa_rdma_write_bytes",
    "efa_rx_dropped",
    "efa_rdma_read_wr_err",
    "efa_rdma_write_wr_err",
    "efa_unresponsive_remote_events",
)
EFA_ERRORS = ("efa_rx_dropped", "efa_rdma_read_wr_err", "efa_rdma_write_wr_err")
INTERVAL_S = 60

XID_HARDWARE = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
"""Xids that mean the GPU, its memory, NVLink or its firmware failed (NVIDIA, "XID Errors", the catalogue's
hardware and driver classes): 48 double-bit ECC error, 63 / 64 ECC page retirement or row remapping (recorded /
failed), 74 NVLink error, 79 GPU fallen off the bus, 92 high single-bit ECC rate, 94 / 95 contained / uncontained
ECC error, 119 / 120 GSP RPC timeout / GSP error."""


def xid_pattern() -> str:
    """A space-delimited filter pattern (CloudWatch Logs User Guide, "Filter pattern syntax for metric filters",
    space-delimited log events, `||` and `...`) on the short-iso journal line the hosts write:
    `2026-12-01T22:00:00+0000 ip-10-0-1-2 kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the
    bus.`: the code field is `79,` (the driver writes a comma after it)."""
    codes = " || ".join(f'code="{c},"' for c in XID_HARDWARE)
    return f'[time, host, kernel="kernel:", nvrm="NVRM:", xid="Xid", pci, {codes}, ...]'


def hosts_namespace(config: BlueprintConfig) -> str:
    """The namespace the blueprint's hosts publish to: one per blueprint, so a cluster-wide series needs no
    dimension."""
    return f"mlstack/{config.name}/hosts"


def kernel_log_group_name(config: BlueprintConfig) -> str:
    return f"/mlstack/{config.name}/host-kernel"


KUBERNETES_ENGINES = ("eks", "hyperpod-eks")


def has_host_agent(training: TrainingConfig) -> bool:
    """Some node group has NVIDIA GPUs (every engine's GPU hosts run the agent; a host without nvidia-smi, such as
    a Neuron node or a Slurm controller, skips it)."""
    return any(
        g.instance.accelerator is not None and g.instance.accelerator.vendor == "nvidia" for g in training.node_groups
    )


def agent_collects_efa(training: TrainingConfig) -> bool:
    """The agent's `efa` section: where some group has EFA and Container Insights does not already count it."""
    return training.engine not in KUBERNETES_ENGINES and any(g.efa for g in training.node_groups)


def agent_config(config: BlueprintConfig, training: TrainingConfig) -> dict[str, object]:
    """The CloudWatch agent's JSON configuration (its schema: amazon-cloudwatch-agent
    translator/config/schema.json). The hosts drop the `efa` section where the node has no EFA device."""
    collected: dict[str, object] = {
        "nvidia_gpu": {"measurement": list(GPU_FIELDS), "metrics_collection_interval": INTERVAL_S},
    }
    if agent_collects_efa(training):
        collected["efa"] = {
            "measurement": list(EFA_COUNTERS),
            "metrics_collection_interval": INTERVAL_S,
            "drop_original_metrics": list(EFA_COUNTERS),
        }
    return {
        # The region of the blueprint: HyperPod nodes are EC2 instances of a service account, so the agent is not
        # left to find its region (or the account's endpoint) from the instance.
        "agent": {"region": config.env.region, "metrics_collection_interval": INTERVAL_S},
        "metrics": {
            "namespace": hosts_namespace(config),
            "aggregation_dimensions": [[], ["host"]],
            "metrics_collected": collected,
        },
        "logs": {
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {
                            "file_path": KERNEL_LOG,
                            "log_group_name": kernel_log_group_name(config),
                            "log_stream_name": "{hostname}",
                            "timezone": "UTC",
                        }
                    ]
                }
            }
        },
    }


def host_agent(config: BlueprintConfig, training: TrainingConfig) -> HostAgent | None:
    if not has_host_agent(training):
        return None
    text = json.dumps(agent_config(config, training), indent=1, sort_keys=True)
    return HostAgent(
        config=text,
        namespace=hosts_namespace(config),
        kernel_log_group_name=kernel_log_group_name(config),
        xid_pattern=xid_pattern(),
    )


def host_widgets_and_alarms(
    config: BlueprintConfig, training: TrainingConfig, agent: HostAgent, idle_percent: int, idle_minutes: int
) -> tuple[list[Widget], list[Alarm]]:
    """Dashboard graphs and alarms on the agent's cluster-wide series (no dimension) and the Xid metric filter."""
    ns = agent.namespace

    def m(name: str, statistic: str = "Average", period: int = INTERVAL_S, label: str = "") -> Metric:
        return Metric(ns, name, (), statistic, period, label or f"{name} ({statistic})")

    widgets = [
        Widget(
            "GPU utilisation, % (every GPU of the cluster)",
            (
                m("nvidia_smi_utilization_gpu"),
                m("nvidia_smi_utilization_gpu", "Minimum"),
                m("nvidia_smi_utilization_memory"),
            ),
            GPU_PAGE,
        ),
        Widget(
            "GPU memory (MiB), temperature (C), power (W)",
            (
                m("nvidia_smi_memory_used", "Maximum"),
                m("nvidia_smi_memory_total", "Maximum"),
                m("nvidia_smi_temperature_gpu", "Maximum"),
                m("nvidia_smi_power_draw"),
            ),
            GPU_PAGE,
        ),
        Widget("GPU Xid errors (kernel log)", (m(agent.xid_metric, "Sum", 300),), XID_PAGE),
    ]
    period = 300
    alarms = [
        Alarm(
            "AcceleratorsIdle",
            f"GPU utilisation (nvidia-smi, every GPU of the cluster) below {idle_percent}% for {idle_minutes} "
            "minutes: nodes bill while idle (no data, no running node: OK)",
            (("util", m("nvidia_smi_utilization_gpu", "Average", period)),),
            threshold=idle_percent,
            comparison="LessThanThreshold",
            evaluation_periods=idle_minutes * 60 // period,
            treat_missing_data="notBreaching",
            source=GPU_PAGE,
        ),
        Alarm(
            "GpuErrors",
            "NVIDIA hardware Xid in a node's kernel log ("
            + ", ".join(str(c) for c in XID_HARDWARE)
            + ": ECC, row remapping, NVLink, GPU fallen off the bus, GSP): see "
            f"{agent.kernel_log_group_name} for the code and the node",
            (("xid", m(agent.xid_metric, "Sum", period)),),
            threshold=0,
            comparison="GreaterThanThreshold",
            evaluation_periods=1,
            treat_missing_data="notBreaching",
            source=XID_PAGE,
        ),
    ]
    if agent_collects_efa(training):
        widgets.append(
            Widget(
                "EFA (cluster, bytes and errors per minute)",
                tuple(m(c, "Sum") for c in EFA_COUNTERS),
                EFA_PAGE,
            )
        )
        names = tuple(f"e{i}" for i in range(len(EFA_ERRORS)))
        alarms.append(
            Alarm(
                "EfaErrors",
                "EFA devices dropped received packets or failed RDMA work requests (" + ", ".join(EFA_ERRORS) + ")",
                tuple((n, m(c, "Sum", period)) for n, c in zip(names, EFA_ERRORS, strict=True)),
                # FILL: a counter with nothing to count may send no point.
                expression=" + ".join(f"FILL({n}, 0)" for n in names),
                threshold=0,
                comparison="GreaterThanThreshold",
                evaluation_periods=1,
                treat_missing_data="notBreaching",
                source=EFA_PAGE,
            )
        )
    return widgets, alarms
