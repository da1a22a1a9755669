"""nccl-tests on EKS and HyperPod-EKS: a Kubeflow Trainer v2 `TrainingRuntime` with the MPI policy and its
`TrainJob`, per acceptance node group.

Shaped like Kubeflow's own MPI runtimes (kubeflow/trainer `manifests/base/runtimes/deepspeed_distributed.yaml`):
- SSH keys are the Trainer's: its MPI plugin generates a key pair per TrainJob in a Secret and mounts it at
  `sshAuthMountPath` (mode 0640) in the containers named `node` of the `node` and `launcher` jobs, and hands the
  launcher a hostfile (`OMPI_MCA_orte_default_hostfile`). Nothing is baked into the image but sshd's
  configuration: every pod runs as `mpiuser` (uid 1000, fsGroup 1000 so the mounted key is readable), the nodes run
  a non-root sshd on port 2222 with the mounted key as host key (`/home/mpiuser/.sshd_config`, written by
  runtime/containers/nccl-tests.Dockerfile), and the client's port 2222 is in the image's ssh_config.
- The launcher starts only when every node is Ready (JobSet `dependsOn`, readiness = sshd accepts on 2222), and
  the nodes' names resolve before that (`publishNotReadyAddresses`), so mpirun never races sshd.
"""

from __future__ import annotations

from typing import Any

from mlstack.catalog import efa_layout
from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.k8s.job import HUGEPAGES_2MI
from mlstack.k8s.kube import EFA_TAINT, LABEL_PREFIX, accelerator_resource, accelerator_taint_key
from mlstack.workloads.nccl import ALL_REDUCE_ARGS, acceptance_groups, acceptance_nodes

SSH_PATH = "/home/mpiuser/.ssh"
SSHD_CONFIG = "/home/mpiuser/.sshd_config"
SSH_PORT = 2222
MPI_UID = 1000
ALL_REDUCE = "/opt/nccl-tests/build/all_reduce_perf"


def _security(pod: dict[str, Any]) -> dict[str, Any]:
    pod["securityContext"] = {"runAsUser": MPI_UID, "runAsGroup": MPI_UID, "fsGroup": MPI_UID}
    return pod


def group_docs(config: BlueprintConfig, group: NodeGroupConfig, image: str) -> list[dict[str, Any]]:
    """TrainingRuntime + TrainJob that run all_reduce_perf on every GPU of `group.max_size` nodes."""
    assert config.training is not None
    it = group.instance
    assert it.accelerator is not None
    gpus = it.accelerator.count
    nodes = acceptance_nodes(config, group)
    name = f"nccl-tests-{group.name}"
    namespace = config.training.job.namespace
    resources: dict[str, str | int] = {
        str(accelerator_resource(it)): gpus,
        "vpc.amazonaws.com/efa": sum(1 for nic in efa_layout(it.name) if nic.is_efa),
        "hugepages-2Mi": HUGEPAGES_2MI,
        "memory": f"{int(it.memory_gib * 0.8)}Gi",
        "cpu": str(max(1, int(it.vcpus * 0.9))),
    }
    taints = [k for k in (accelerator_taint_key(it), EFA_TAINT) if k]
    mpirun = [
        "mpirun", "-np", str(nodes * gpus), "-npernode", str(gpus), "--bind-to", "none",
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_DEBUG=INFO", ALL_REDUCE, *ALL_REDUCE_ARGS,
    ]  # fmt: skip
    node_pod = _security(
        {
            "nodeSelector": {f"{LABEL_PREFIX}/node-group": group.name},
            "tolerations": [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in taints],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "containers": [
                {
                    "name": "node",
                    "image": image,
                    "command": ["/usr/sbin/sshd"],
                    "args": ["-De", "-f", SSHD_CONFIG],
                    "readinessProbe": {"tcpSocket": {"port": SSH_PORT}, "initialDelaySeconds": 5, "periodSeconds": 5},
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                }
            ],
        }
    )
    launcher_pod = _security(
        {
            "containers": [
                {
                    "name": "node",
                    "image": image,
                    "command": mpirun,
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
                }
            ]
        }
    )
    node_job = {"name": "node", "template": {"spec": {"template": {"spec": node_pod}}}}
    launcher_job = {
        "name": "launcher",
        "dependsOn": [{"name": "node", "status": "Ready"}],
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": launcher_pod}},
        },
    }
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "mlPolicy": {
                "numNodes": nodes,
                "mpi": {"numProcPerNode": gpus, "mpiImplementation": "OpenMPI", "sshAuthMountPath": SSH_PATH},
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [node_job, launcher_job],
                }
            },
        },
    }
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": name},
            "trainer": {"numNodes": nodes},
        },
    }
    return [runtime, job]


def render(config: BlueprintConfig, image: str) -> list[dict[str, Any]]:
    """TrainingRuntime + TrainJob per acceptance group (empty when the blueprint has none)."""
    return [doc for g in acceptance_groups(config) for doc in group_docs(config, g, image)]
