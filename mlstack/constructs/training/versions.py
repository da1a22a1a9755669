"""Every Helm chart and EKS add-on version of the training cluster, pinned in this one module.

Charts are recorded at synth and fetched by the kubectl-provider Lambda at deploy time (nothing here is
downloaded or validated offline). Bump a version here, run `make check-charts` (it needs the network: each
version must exist where the chart is pulled from), review the values in `cluster.py` and `cluster_charts.py`
(device plugins), and redeploy. Sources for each pin are given next to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    release: str
    chart: str
    repository: str
    """`https://...` Helm repository, or the full `oci://...` chart reference."""
    version: str
    namespace: str
    source: str


NVIDIA_DEVICE_PLUGIN = Chart(
    release="nvidia-device-plugin",
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.17.1",
    namespace="kube-system",
    source="github.com/NVIDIA/k8s-device-plugin; version as pinned by aws-ia/terraform-aws-eks-blueprints patterns",
)

NEURON_HELM_CHART = Chart(
    release="neuron-helm-chart",
    chart="neuron-helm-chart",
    repository="oci://public.ecr.aws/neuron/neuron-helm-chart",
    version="1.9.0",
    namespace="kube-system",
    source="github.com/aws-neuron/neuron-helm-charts release 1.9.0 (Neuron SDK 2.31.0); only its device plugin is used",
)

EFA_DEVICE_PLUGIN = Chart(
    release="aws-efa-k8s-device-plugin",
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    version="v0.5.30",
    namespace="kube-system",
    source="aws/eks-charts stable/aws-efa-k8s-device-plugin Chart.yaml @ 5239609",
)

KUBEFLOW_TRAINER = Chart(
    release="kubeflow-trainer",
    chart="kubeflow-trainer",
    repository="oci://ghcr.io/kubeflow/charts/kubeflow-trainer",
    version="2.3.0",
    namespace="kubeflow-system",
    source="github.com/kubeflow/trainer release v2.3.0 (TrainJob / TrainingRuntime CRDs)",
)

KARPENTER = Chart(
    release="karpenter",
    chart="karpenter",
    repository="oci://public.ecr.aws/karpenter/karpenter",
    version="1.14.1",
    namespace="kube-system",
    source="github.com/aws/karpenter-provider-aws release v1.14.1 (chart and CRDs karpenter.sh/v1, "
    "karpenter.k8s.aws/v1 with EC2NodeClass networkInterfaces); kube-system as in Karpenter's getting-started guide",
)
"""capacity_manager karpenter: the controller (on the system nodes), installed without its CRDs; NodePools are ours."""

KARPENTER_CRD = Chart(
    release="karpenter-crd",
    chart="karpenter-crd",
    repository="oci://public.ecr.aws/karpenter/karpenter-crd",
    version=KARPENTER.version,
    namespace=KARPENTER.namespace,
    source="github.com/aws/karpenter-provider-aws release v1.14.1 charts/karpenter-crd (the CRDs as templates, so a "
    "version bump upgrades them; the controller chart's crds/ are installed once and never upgraded: Karpenter docs "
    'v1.14, Upgrade Guide, "CRD Upgrades")',
)
"""Karpenter's CRDs (NodePool, NodeClaim, EC2NodeClass, NodeOverlay, CapacityBuffer), always at KARPENTER's version."""

KUEUE = Chart(
    release="kueue",
    chart="kueue",
    repository="oci://registry.k8s.io/kueue/charts/kueue",
    version="0.19.2",
    namespace="kueue-system",
    source="github.com/kubernetes-sigs/kueue release v0.19.2 (API kueue.x-k8s.io/v1beta2, Kubeflow Trainer TrainJob "
    "integration, topology-aware scheduling beta); OCI chart as in Kueue docs, Installation with Helm",
)
KUEUE_IMAGE = "registry.k8s.io/kueue/kueue"
"""The release image of KUEUE (the chart's own default names a staging registry and pull policy Always)."""

KEDA = Chart(
    release="keda",
    chart="keda",
    repository="https://kedacore.github.io/charts",
    version="2.20.2",
    namespace="keda",
    source="kedacore/charts keda/Chart.yaml at tag v2.20.2 (chart and app version 2.20.2). At least 2.20.0: the "
    "metrics-api keys aggregateFromKubeServiceEndpoints and aggregationType came in 2.19.0 (kedacore/keda PR #6565, "
    "CHANGELOG v2.19.0; older releases ignore them and read one server through the Service), and 2.19 selected "
    "every EndpointSlice of the namespace instead of the Service's (kedacore/keda #7641, fixed in 2.20.0)",
)
"""Event-driven autoscaler: the vLLM servers scale on their queue depth (`vllm:num_requests_waiting`). 2.20.2 is
built on client-go v0.35.5 (kedacore/keda go.mod at v2.20.2), the API of the serving cluster's default Kubernetes
1.35; 2.17 was built for 1.30-1.32."""

LWS = Chart(
    release="lws",
    chart="lws",
    repository="oci://registry.k8s.io/lws/charts/lws",
    version="v0.10.0",
    namespace="lws-system",
    source="github.com/kubernetes-sigs/lws release v0.10.0 (2026-08-11; API leaderworkerset.x-k8s.io/v1); OCI chart, "
    'release name and namespace as in LWS docs, "Installation", Install by Helm. The chart is pushed with the git tag '
    "as its version (hack/push-chart.sh: `helm package --version v0.10.0`), so the OCI tag keeps the `v`; Helm also "
    "resolves the docs' `--version 0.10.0` to it",
)
"""LeaderWorkerSet: multi-node vLLM servers (one leader and its workers per server). Its CRD is in the chart's
`crds/` (installed once, never upgraded by Helm: a version bump applies the new CRD first, LWS docs "Upgrade by
Helm"). Its webhooks fail closed on LeaderWorkerSets and their pods, so the chart is installed with `wait`."""

MOUNTPOINT_S3_CSI = "aws-mountpoint-s3-csi-driver"
"""EKS add-on of the Mountpoint for Amazon S3 CSI driver (EKS User Guide, "Mountpoint for Amazon S3 CSI Driver").
Version: the EKS default for the cluster's Kubernetes version (v2 for the versions allowed here [INFERRED from the
v2 release of 2025; check with `aws eks describe-addon-versions --addon-name aws-mountpoint-s3-csi-driver`]): v2
takes driver-level credentials from EKS Pod Identity (awslabs/mountpoint-s3-csi-driver PR #451) and the `cache:
emptyDir` volume attribute. Its configuration key `node.tolerateAllTaints` lets the node plugin run on tainted GPU
nodes (check with `aws eks describe-addon-configuration --addon-name aws-mountpoint-s3-csi-driver --addon-version
<v>`)."""
MOUNTPOINT_SERVICE_ACCOUNT = "s3-csi-driver-sa"
"""Service account of the driver in kube-system (its Pod Identity association's subject)."""

HYPERPOD_CLI_COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"
"""Engine hyperpod-eks: the HyperPod dependencies chart (`helm_chart/HyperPodHelmChart`: health-monitoring agent,
deep health check, job auto-restart, Kubeflow training operator, MPI operator, NVIDIA/Neuron/EFA device plugins)
at aws/sagemaker-hyperpod-cli main of 2026-06-22 (the chart directory last changed in a00b22d, 2026-06-19). The
chart's own version is always 0.1.0 and its sub-charts are local `file://` paths: it is in no chart repository, so
the commit is the pin, and the deploy installs it from the commit's archive (`HyperPodDependencies`)."""
HYPERPOD_CHART_PATH = "helm_chart/HyperPodHelmChart"
HYPERPOD_CHART_ARCHIVE = f"https://github.com/aws/sagemaker-hyperpod-cli/archive/{HYPERPOD_CLI_COMMIT}.tar.gz"
HYPERPOD_CHART_SHA256 = "d4bef34e665877995a82614fde96124cc148f674a775e427dd24887c527255f5"
"""Digest of the chart folder's 147 files at `HYPERPOD_CLI_COMMIT` (the installer refuses any other content).
Recompute it when bumping the commit, from a clone::

    git archive <commit> helm_chart/HyperPodHelmChart | tar -x -C /tmp/chart
    cd /tmp/chart/helm_chart/HyperPodHelmChart
    find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum
"""
HYPERPOD_CHART_RELEASE = "hyperpod-dependencies"
HYPERPOD_CHART_NAMESPACE = "kube-system"
"""Release name and namespace of the documented install (SageMaker HyperPod docs, "Installing packages on the Amazon
EKS cluster using Helm"; the chart itself puts its agents in `aws-hyperpod`, a name HyperPod requires)."""

ADDONS: dict[str, str | None] = {
    # None = the EKS default version for the cluster's Kubernetes version. For the versions this project allows
    # (>= 1.33, see mlstack.config.training.KubernetesVersion) the default VPC CNI is newer than 1.18.5, the first
    # release that supports EFA-only interfaces (VPC CNI release notes) [INFERRED from the EKS add-on release cadence;
    # check with `aws eks describe-addon-versions --addon-name vpc-cni` before deploying].
    "vpc-cni": None,
    "kube-proxy": None,
    "eks-pod-identity-agent": None,
    "coredns": None,
    "aws-fsx-csi-driver": None,
    "eks-node-monitoring-agent": None,
    # CloudWatch agent + Fluent Bit; with Container Insights enhanced observability (the add-on's default agent
    # config) it also runs the Neuron monitor on Trainium/Inferentia nodes (its DCGM exporter is turned off:
    # cluster_parts.cloudwatch_observability_values). EKS Pod Identity needs add-on >= v3.1.0 (CloudWatch User Guide,
    # "Quick start with the Amazon CloudWatch Observability EKS add-on"); the EKS default for Kubernetes >= 1.33 is
    # newer [INFERRED: check with `aws eks describe-addon-versions --addon-name amazon-cloudwatch-observability`].
    "amazon-cloudwatch-observability": None,
}
"""Managed EKS add-ons, in creation order (the first three before nodes join, the rest once they have)."""

VPC_CNI_MIN_VERSION = "1.18.5"
"""Oldest VPC CNI that supports `efa-only` interfaces (EKS User Guide, EFA with EKS)."""

NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
"""Service account of the VPC CNI DaemonSet in kube-system (its Pod Identity association's subject)."""

CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
"""Namespace and service account of the add-on's CloudWatch agent (the Pod Identity association's subject)."""

HYPERPOD_TASK_GOVERNANCE = "amazon-sagemaker-hyperpod-taskgovernance"
HYPERPOD_TASK_GOVERNANCE_VERSION = "v1.6.0-eksbuild.1"
"""EKS add-on of HyperPod task governance (engine hyperpod-eks with teams): it installs Kueue and the objects HyperPod
manages (ClusterQueues, LocalQueues, WorkloadPriorityClasses, ResourceFlavors). Pinned, unlike the add-ons above: v1.6
packages Kueue v0.19.2, the same Kueue as `KUEUE` ("Upgrade the task governance add-on"), and an add-on upgrade can
need a CRD migration (v1.3 to v1.5 did), so a new deploy must not pick whatever is newest. Check it exists for the
cluster's Kubernetes version with `aws eks describe-addon-versions --addon-name
amazon-sagemaker-hyperpod-taskgovernance` [INFERRED that v1.6 supports 1.34: the docs list no matrix]."""
HYPERPOD_HEALTH_AGENT = "1.0.1892.0_1.0.424.0"
"""The health-monitoring agent image tag of the HyperPod chart at HYPERPOD_CLI_COMMIT (charts/health-monitoring-agent
templates/_helpers.tpl default). HyperPod autoscaling needs 1.0.742.0_1.0.241.0 or later ("Autoscaling on SageMaker
HyperPod EKS", prerequisites)."""
