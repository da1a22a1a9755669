"""What a training blueprint's dashboard and alarms watch, engine by engine: only metrics the engine's agents and
services publish today (no CDK import; the construct is `mlstack.constructs.training.observability`).

- eks and hyperpod-eks run the amazon-cloudwatch-observability add-on (Container Insights with enhanced
  observability, namespace ContainerInsights; CloudWatch User Guide, "Amazon EKS and Kubernetes Container Insights
  with enhanced observability metrics",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html).
  Its DCGM exporter is off on these clusters (one DCGM host engine per GPU node: the node monitoring agent's; the
  agent's dcgm-server runs `nv-hostengine -n -b ALL` on hostPort 5555, chart aws/eks-node-monitoring-agent
  dcgm-daemonset.yaml, and the add-on's CloudWatch agent scrapes only its own exporter). Per-GPU utilisation,
  memory, power, temperature and the Xid lines come instead from the nvidia-smi host agent every engine's GPU
  nodes run (`mlstack.design.host_metrics`: managed node groups' and Karpenter nodes' user data, HyperPod's
  on_create), which needs no DCGM engine. The add-on's accelerated-compute metrics, on by default, still count the
  GPUs pods hold (node_gpu_limit, node_gpu_usage_total, node_gpu_reserved_capacity, from the Kubernetes API), and
  the Neuron monitor gives NeuronCore utilisation and ECC events; EFA counters come from the EFA device plugin's
  devices (node_efa_*).
- Fluent Bit of the same add-on writes container stdout to /aws/containerinsights/<cluster>/application, each
  event a JSON object whose `log` is the line and, when the line is JSON, `log_processed` the parsed line (chart
  values: kubernetes filter `Merge_Log On`, `Merge_Log_Key log_processed`, aws-observability/helm-charts).
- batch: the job's awslogs driver writes each line as one event of the job log group; the hosts run the
  CloudWatch agent (per-GPU nvidia-smi, EFA counters, the kernel log's Xid lines: `mlstack.design.host_metrics`).
- hyperpod-slurm: job output goes to Slurm's files on FSx, not to CloudWatch; the GPU nodes run the same agent.
- FSx for Lustre publishes AWS/FSx metrics per FileSystemId every minute (FSx for Lustre User Guide, "Amazon FSx
  for Lustre metrics and dimensions", https://docs.aws.amazon.com/fsx/latest/LustreGuide/fs-metrics.html).
"""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.constructs.training.metric_names import (
    CONTAINER_INSIGHTS,
    FSX,
    FSX_ID,
    Alarm,
    CompositeAlarm,
    HostAgent,
    Metric,
    ObservabilityDesign,
    StepLog,
    StepMetric,
    Widget,
)
from mlstack.design.host_agent_alarms import agent_missing_alarms
from mlstack.design.host_metrics import host_agent, host_widgets_and_alarms

CI_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html"
FSX_PAGE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/fs-metrics.html"
MISSING_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html"
"""CloudWatch User Guide, "Using Amazon CloudWatch alarms": how an alarm treats missing data."""

STALL_MINUTES = 30
"""No step line for this long: the job finished, failed or hangs (a step of the reference script takes seconds)."""
IDLE_PERCENT = 10
IDLE_MINUTES = 60
"""Accelerators on running nodes below `IDLE_PERCENT` for `IDLE_MINUTES`: a cost alarm."""
FSX_FREE_PERCENT = 10
GIB = 1024**3

STEP_METRICS = (
    StepMetric("StepTime", "step_time_s", "Seconds"),
    StepMetric("TokensPerSecond", "tokens_per_s", "Count/Second"),
    StepMetric("Steps", "1", "Count"),
)


def step_namespace(config: BlueprintConfig) -> str:
    """The namespace of the step metrics the metric filters publish: one per blueprint."""
    return f"mlstack/{config.name}"


def cluster_name_of(config: BlueprintConfig) -> str:
    """The EKS cluster's fixed name (eks, hyperpod-eks), or the HyperPod/Batch cluster's."""
    return f"{config.name}-cluster"


def observability_design(config: BlueprintConfig) -> ObservabilityDesign:
    """The training cluster's dashboard and alarms for the blueprint's engine."""
    training = config.training
    if training is None:
        raise ValueError(f"blueprint {config.name!r} has no training section")
    engine = training.engine
    widgets: list[Widget] = []
    alarms: list[Alarm] = []
    omitted: list[str] = []
    kubernetes = engine in ("eks", "hyperpod-eks")
    agent: HostAgent | None = None
    composites: tuple[CompositeAlarm, ...] = ()
    agent = host_agent(config, training)
    if kubernetes:
        _container_insights(config, training, widgets, alarms, omitted)
    if agent is not None:
        more_widgets, more_alarms = host_widgets_and_alarms(config, training, agent, IDLE_PERCENT, IDLE_MINUTES)
        widgets += more_widgets
        alarms += more_alarms
        missing, composites, unwatched = agent_missing_alarms(config, training, agent, cluster_name_of(config))
        alarms += missing
        omitted += unwatched
        if not kubernetes:
            omitted.append(
                f"node health: {engine} publishes no node-condition metric (HyperPod and Batch replace failed "
                "nodes themselves); GPU Xid errors are counted from the kernel log instead"
            )
    elif not kubernetes:
        omitted.append(
            f"accelerator and EFA metrics: no NVIDIA GPU on this {engine} cluster, and the agent's nvidia-smi "
            "input is the only accelerator source configured (no idle or GPU-error alarm)"
        )
    step_log = _step_log(config, training)
    if step_log is not None:
        namespace = step_log.namespace
        widgets.append(
            Widget(
                "Training steps (reference script's JSON lines, rank 0)",
                tuple(
                    Metric(namespace, m.name, (), "Sum" if m.name == "Steps" else "Average", 60, m.name)
                    for m in STEP_METRICS
                ),
                "metric filters of this stack on the step lines",
            )
        )
        alarms.append(_job_stalled(config, training, namespace))
    else:
        omitted.append(
            "step time, tokens/s and the stalled-job alarm: Slurm writes job output to files on FSx, not to "
            "CloudWatch Logs"
        )
    if training.fsx is not None:
        _fsx(training, widgets, alarms)
    return ObservabilityDesign(
        # Dashboard names are account-wide (not per region): the region keeps two deployments apart.
        dashboard_name=f"mlstack-{config.name}-{config.env.region}",
        widgets=tuple(widgets),
        alarms=tuple(alarms),
        step_log=step_log,
        step_metrics=STEP_METRICS if step_log is not None else (),
        omitted=tuple(omitted),
        host_agent=agent,
        composite_alarms=composites,
    )


def _job_stalled(config: BlueprintConfig, training: TrainingConfig, namespace: str) -> Alarm:
    """No step line for `STALL_MINUTES`.

    Kubernetes engines: only while a pod of the job's namespace runs (Container Insights
    namespace_number_of_running_pods), and a minute without a line counts as 0 steps (FILL), so a job that hangs,
    before its first step too, goes to ALARM and a finished one (no pod left) stays OK. Batch publishes no
    running-job metric: there the alarm notifies on INSUFFICIENT_DATA (no line for the whole window), which a
    job's normal end also gives, 30 minutes later.
    """
    steps = Metric(namespace, "Steps", (), "Sum", 60)
    if training.engine in ("eks", "hyperpod-eks"):
        pods = Metric(
            CONTAINER_INSIGHTS,
            "namespace_number_of_running_pods",
            (("Namespace", training.job.namespace), ("ClusterName", cluster_name_of(config))),
            "Maximum",
            60,
        )
        return Alarm(
            "JobStalled",
            f"No step line for {STALL_MINUTES} minutes while a pod of namespace {training.job.namespace} runs: "
            "the job hangs or crash-loops (OK once steps resume or no pod is left)",
            (("steps", steps), ("pods", pods)),
            threshold=1,
            comparison="LessThanThreshold",
            evaluation_periods=STALL_MINUTES,
            treat_missing_data="notBreaching",
            expression="IF(FILL(pods, 0) > 0, FILL(steps, 0), 1)",
            source=CI_PAGE,
        )
    return Alarm(
        "JobStalled",
        f"No step line for {STALL_MINUTES} minutes: the job finished, failed or hangs (INSUFFICIENT_DATA "
        "notifies; OK again once steps resume; AWS Batch has no running-job metric to tell the cases apart)",
        (("steps", steps),),
        threshold=1,
        comparison="LessThanThreshold",
        evaluation_periods=STALL_MINUTES,
        treat_missing_data="missing",
        notify_on_insufficient_data=True,
        source=MISSING_PAGE,
    )


def _step_log(config: BlueprintConfig, training: TrainingConfig) -> StepLog | None:
    namespace = step_namespace(config)
    if training.engine in ("eks", "hyperpod-eks"):
        return StepLog(
            log_group_name=f"/aws/containerinsights/{cluster_name_of(config)}/application",
            create=True,
            field_prefix="$.log_processed.",
            conditions=(f'$.kubernetes.namespace_name = "{training.job.namespace}"',),
            namespace=namespace,
        )
    if training.engine == "batch":
        return StepLog(log_group_name=None, create=False, field_prefix="$.", namespace=namespace)
    return None


def _container_insights(
    config: BlueprintConfig,
    training: TrainingConfig,
    widgets: list[Widget],
    alarms: list[Alarm],
    omitted: list[str],
) -> None:
    """Container Insights' node, GPU-allocation, Neuron and EFA pieces. GPU utilisation, the idle alarm and Xid
    errors come from the host agent on the GPU nodes (`host_widgets_and_alarms`): the add-on's DCGM exporter is off
    (the node monitoring agent runs the node's one DCGM host engine)."""
    cluster = (("ClusterName", cluster_name_of(config)),)

    def ci(name: str, statistic: str = "Average", period: int = 60, label: str = "") -> Metric:
        return Metric(CONTAINER_INSIGHTS, name, cluster, statistic, period, label or name)

    accelerators = {g.instance.accelerator.vendor for g in training.node_groups if g.instance.accelerator}
    widgets.append(
        Widget(
            "Nodes",
            (
                ci("cluster_node_count", "Maximum"),
                ci("cluster_failed_node_count", "Maximum"),
                ci("node_cpu_utilization"),
                ci("node_memory_utilization"),
            ),
            CI_PAGE,
        )
    )
    alarms.append(
        Alarm(
            "NodesFailed",
            "A node of the cluster has a failing node condition for 5 minutes (Container Insights "
            "cluster_failed_node_count)",
            (("failed", ci("cluster_failed_node_count", "Maximum")),),
            threshold=0,
            comparison="GreaterThanThreshold",
            evaluation_periods=5,
            treat_missing_data="notBreaching",
            source=CI_PAGE,
        )
    )
    if "nvidia" in accelerators:
        widgets.append(
            Widget(
                "GPUs held by pods",
                (ci("node_gpu_limit", "Sum"), ci("node_gpu_usage_total", "Sum"), ci("node_gpu_reserved_capacity")),
                CI_PAGE,
            )
        )
    if "aws" in accelerators:
        widgets.append(
            Widget(
                "Neuron devices",
                (
                    ci("node_neuroncore_utilization"),
                    ci("node_neuroncore_memory_usage_total"),
                    ci("node_neurondevice_hw_ecc_events_total", "Sum"),
                    ci("node_neuron_execution_errors_total", "Sum"),
                ),
                CI_PAGE,
            )
        )
        alarms.append(
            Alarm(
                "NeuronErrors",
                "Neuron device ECC events (corrected and uncorrected) on a node of the cluster",
                (("ecc", ci("node_neurondevice_hw_ecc_events_total", "Sum", 300)),),
                threshold=0,
                comparison="GreaterThanThreshold",
                evaluation_periods=1,
                treat_missing_data="notBreaching",
                source=CI_PAGE,
            )
        )
        period = 300
        alarms.append(
            Alarm(
                "NeuronCoresIdle",
                f"NeuronCore utilisation below {IDLE_PERCENT}% for {IDLE_MINUTES} minutes on running Neuron nodes: "
                "nodes bill while idle",
                (("util", ci("node_neuroncore_utilization", "Average", period)),),
                threshold=IDLE_PERCENT,
                comparison="LessThanThreshold",
                evaluation_periods=IDLE_MINUTES * 60 // period,
                treat_missing_data="notBreaching",
                source=CI_PAGE,
            )
        )
    if any(g.efa for g in training.node_groups):
        widgets.append(
            Widget(
                "EFA (per node, bytes/s and dropped packets/s)",
                (
                    ci("node_efa_rx_bytes"),
                    ci("node_efa_tx_bytes"),
                    ci("node_efa_rdma_read_bytes"),
                    ci("node_efa_rdma_write_bytes"),
                    ci("node_efa_rx_dropped", "Sum"),
                ),
                CI_PAGE,
            )
        )
        alarms.append(
            Alarm(
                "EfaErrors",
                "EFA devices dropped received packets (node_efa_rx_dropped above zero)",
                (("dropped", ci("node_efa_rx_dropped", "Sum", 300)),),
                threshold=0,
                comparison="GreaterThanThreshold",
                evaluation_periods=1,
                treat_missing_data="notBreaching",
                source=CI_PAGE,
            )
        )


def _fsx(training: TrainingConfig, widgets: list[Widget], alarms: list[Alarm]) -> None:
    """FSx widgets and the free-capacity alarm; the file system ID is a token the construct fills in."""
    assert training.fsx is not None
    fs = (("FileSystemId", FSX_ID),)
    widgets.append(
        Widget(
            "FSx for Lustre (per minute)",
            (
                Metric(FSX, "DataReadBytes", fs, "Sum", 60, "DataReadBytes"),
                Metric(FSX, "DataWriteBytes", fs, "Sum", 60, "DataWriteBytes"),
                Metric(FSX, "MetadataOperations", fs, "Sum", 60, "MetadataOperations"),
                Metric(FSX, "FreeDataStorageCapacity", fs, "Sum", 60, "FreeDataStorageCapacity"),
            ),
            FSX_PAGE,
        )
    )
    capacity = training.fsx.storage_capacity_gib * GIB
    alarms.append(
        Alarm(
            "FsxFreeCapacityLow",
            f"FSx for Lustre free capacity below {FSX_FREE_PERCENT}% of {training.fsx.storage_capacity_gib} GiB",
            (("free", Metric(FSX, "FreeDataStorageCapacity", fs, "Sum", 60)),),
            expression=f"100 * free / {capacity}",
            threshold=FSX_FREE_PERCENT,
            comparison="LessThanThreshold",
            evaluation_periods=5,
            datapoints_to_alarm=1,
            treat_missing_data="ignore",
            source=FSX_PAGE,
        )
    )
