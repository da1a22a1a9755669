"""The alarms that make a GPU host without a working CloudWatch agent loud (the idle and Xid alarms of
`host_metrics` read missing data as "no node"): the installer's own failure datapoint on every engine, fewer hosts
reporting than the engine runs where an independent count exists, and a composite alarm for a wholly silent fleet
on the Kubernetes engines (no CDK import)."""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.config.training import TrainingConfig
from mlstack.constructs.training.metric_names import CONTAINER_INSIGHTS, Alarm, CompositeAlarm, HostAgent, Metric
from mlstack.design.host_metrics import GPU_PAGE

PUT_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricData.html"
CI_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html"
COMPOSITE_PAGE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create_Composite_Alarm.html"
"""CloudWatch User Guide, "Create a composite alarm"; the rule's syntax (`ALARM("name or ARN") AND ...`):
CloudWatch API Reference, PutCompositeAlarm, AlarmRule; CloudFormation's AWS::CloudWatch::CompositeAlarm."""
MISSING_DATA_PAGE = (
    "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html#alarms-and-missing-data"
)

INSTALL_FAILED = "host_agent_install_failed"
"""What the installer publishes, without the agent, when it cannot install or start it on a GPU host
(runtime/host_metrics/install_cloudwatch_agent.sh `report`): 1, once with dimensions InstanceId and Reason (the
failed step: architecture, download, signature, package, configuration, kernel_log, agent_start, no_gpu; or
configuration_clash, where the agent runs without our metrics because another configuration of the host sets
their keys differently) and once without any, the series `HostAgentInstallFailed` watches."""
INSTALL_OUTPUT = {
    "eks": "`journalctl -u mlstack-host-agent` on the node (the transient unit the user data starts)",
    "hyperpod-eks": "the node's lifecycle log, CloudWatch Logs /aws/sagemaker/Clusters/<cluster>/<id>, stream "
    "LifecycleConfig/<group>/<instance-id>",
    "hyperpod-slurm": "the node's lifecycle log, CloudWatch Logs /aws/sagemaker/Clusters/<cluster>/<id>, stream "
    "LifecycleConfig/<group>/<instance-id>",
    "batch": "/var/log/cloud-init-output.log on the container instance (the installer is a user-data part)",
}
MISSING_PERIOD_S = 300
MISSING_PERIODS = 3
"""GPUs that should report and do not, in each of 3 periods of 5 minutes: long enough for a new node's agent
(installed within minutes of the node, after the driver), short enough to see a dead agent within the hour the
idle alarm needs."""


def agent_missing_alarms(
    config: BlueprintConfig, training: TrainingConfig, agent: HostAgent, cluster_name: str
) -> tuple[list[Alarm], tuple[CompositeAlarm, ...], list[str]]:
    """The alarms that make a GPU host without a working agent loud (the idle and Xid alarms read missing data as
    no node), the composite alarm among them, and, one line each, what is not watched.

    - `HostAgentInstallFailed`: the installer's own datapoint (`INSTALL_FAILED`), every engine.
    - `HostAgentMissing`: fewer GPUs report nvidia_smi_utilization_gpu (SampleCount of the cluster series: one
      sample per GPU per minute) than an independent count says run, for 15 minutes. eks and hyperpod-eks: Container
      Insights' node_gpu_limit at ClusterName, "the total number of GPU(s) available on the node" (`CI_PAGE`), which
      the add-on's agent reads from each node's status capacity of nvidia.com/gpu through the Kubernetes API, not
      from DCGM (amazon-contributing/opentelemetry-collector-contrib, awscontainerinsightreceiver
      internal/stores/podstore.go, decorateNode; on by default, `accelerated_compute_metrics`), so it is there with
      the add-on's DCGM exporter off; Sum per period is the GPUs of every node times the minutes. hyperpod-slurm:
      the GPUs of the instance groups' InstanceCount (HyperPod publishes no instance count to CloudWatch), so the
      alarm also fires once the budget action has taken the groups to 0 and while HyperPod replaces a node.
    - `HostAgentNoneReporting` (eks, hyperpod-eks): no GPU reports at all while Kubernetes counts some. The math
      alarm sees the hosts that are silent while others report; with no agent sample anywhere in the window it would
      rest on FILL filling a series that has no datapoint at all, which the CloudWatch User Guide's metric math page
      does not promise. So a composite alarm (`COMPOSITE_PAGE`) reads two single-metric alarms, whose missing-data
      handling is documented (`MISSING_DATA_PAGE`) and which notify no one themselves: `HostAgentGpusPresent`
      (node_gpu_limit Sum > 0, missing data not breaching: no GPU node, OK) and `HostAgentNoSample` (SampleCount
      of nvidia_smi_utilization_gpu < 1, missing data breaching: no sample is the case it watches).
    - batch: nothing counts a compute environment's instances in CloudWatch (AWS Batch publishes no metric; its ECS
      cluster is created by Batch, unnamed at synth, and its AWS/ECS metrics are reservation percentages).
    """
    window = MISSING_PERIOD_S * MISSING_PERIODS // 60
    where = INSTALL_OUTPUT[training.engine]
    ns = agent.namespace
    minutes = MISSING_PERIOD_S // 60
    alarms = [
        Alarm(
            "HostAgentInstallFailed",
            f"The CloudWatch agent could not be installed or started on a GPU host, or another agent configuration "
            f"left out its metrics (Reason configuration_clash): no GPU metrics, idle or Xid alarm for it. Which host "
            f"and step: metric {INSTALL_FAILED} in {ns} (dimensions InstanceId, Reason); why: {where}. One "
            "notification per failed install (OK again 5 minutes later)",
            (("failed", Metric(ns, INSTALL_FAILED, (), "Sum", MISSING_PERIOD_S)),),
            threshold=0,
            comparison="GreaterThanThreshold",
            evaluation_periods=1,
            treat_missing_data="notBreaching",
            source=PUT_PAGE,
        )
    ]
    gpus = [
        g
        for g in training.node_groups
        if g.instance.accelerator is not None and g.instance.accelerator.vendor == "nvidia"
    ]
    # Half the smallest node's GPUs: one silent node always crosses it, a sample early or late does not.
    smallest = min(g.instance.accelerator.count for g in gpus if g.instance.accelerator is not None)
    reporting = Metric(ns, "nvidia_smi_utilization_gpu", (), "SampleCount", MISSING_PERIOD_S)
    missing = (
        f"GPUs without the CloudWatch agent's metrics for {window} minutes: an agent stopped, or a host never ran "
        f"the installer (its output: {where}; on the node: amazon-cloudwatch-agent-ctl -a status)"
    )
    if training.engine in ("eks", "hyperpod-eks"):
        limit = Metric(CONTAINER_INSIGHTS, "node_gpu_limit", (("ClusterName", cluster_name),), "Sum", MISSING_PERIOD_S)
        alarms += [
            Alarm(
                "HostAgentMissing",
                missing + "; the nodes' GPUs: Container Insights node_gpu_limit. Some GPUs silent while others "
                "report; none reporting at all: HostAgentNoneReporting",
                (("gpus", limit), ("reporting", reporting)),
                expression=f"(FILL(gpus, 0) - FILL(reporting, 0)) / {minutes}",
                threshold=smallest / 2,
                comparison="GreaterThanThreshold",
                evaluation_periods=MISSING_PERIODS,
                treat_missing_data="notBreaching",
                source=CI_PAGE,
            ),
            Alarm(
                "HostAgentGpusPresent",
                f"Container Insights counts GPUs on the cluster's nodes (node_gpu_limit) for {window} minutes; no "
                "action: an input of HostAgentNoneReporting",
                (("gpus", limit),),
                threshold=0,
                comparison="GreaterThanThreshold",
                evaluation_periods=MISSING_PERIODS,
                treat_missing_data="notBreaching",
                source=CI_PAGE,
                notify=False,
            ),
            Alarm(
                "HostAgentNoSample",
                f"No GPU of the cluster sent the CloudWatch agent's nvidia_smi_utilization_gpu for {window} minutes "
                "(also while no GPU node runs); no action: an input of HostAgentNoneReporting",
                (("reporting", reporting),),
                threshold=1,
                comparison="LessThanThreshold",
                evaluation_periods=MISSING_PERIODS,
                treat_missing_data="breaching",
                source=MISSING_DATA_PAGE,
                notify=False,
            ),
        ]
        composite = CompositeAlarm(
            "HostAgentNoneReporting",
            f"No GPU of the cluster sends the CloudWatch agent's metrics while Container Insights counts GPUs, for "
            f"{window} minutes: every agent stopped or never installed (endpoint, IAM, namespace; a one-node cluster "
            f"whose agent died; nodes whose user data never ran the installer). Its output: {where}; on a node: "
            "amazon-cloudwatch-agent-ctl -a status (HostAgentMissing may alarm with it)",
            ("HostAgentGpusPresent", "HostAgentNoSample"),
            source=COMPOSITE_PAGE,
        )
        return alarms, (composite,), []
    if training.engine == "hyperpod-slurm":
        expected = sum(g.desired_size * g.instance.accelerator.count for g in gpus if g.instance.accelerator)
        alarms.append(
            Alarm(
                "HostAgentMissing",
                missing + f"; the cluster runs {expected} GPUs (InstanceCount of its GPU groups). Expected in ALARM "
                "after the first deploy until the nodes first report (HyperPod creates them in 20 minutes or more), "
                "after the budget action scaled the groups to 0, and while HyperPod replaces a node",
                (("reporting", reporting),),
                expression=f"{expected} - FILL(reporting, 0) / {minutes}",
                threshold=smallest / 2,
                comparison="GreaterThanThreshold",
                evaluation_periods=MISSING_PERIODS,
                # Breaching: should FILL give nothing for a series without any sample in the window, a cluster
                # where no GPU reports still alarms.
                treat_missing_data="breaching",
                source=GPU_PAGE,
            )
        )
        return alarms, (), []
    return (
        alarms,
        (),
        [
            f"a GPU host whose agent stopped after a good install ({training.engine}): no CloudWatch metric counts "
            "the compute environment's instances to compare with (HostAgentInstallFailed covers failed installs)"
        ],
    )
