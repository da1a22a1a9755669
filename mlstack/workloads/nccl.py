"""EFA acceptance test: an nccl-tests all-reduce job per EFA GPU node group, and a parser of its output.

`render_acceptance(config)` gives, for each GPU node group with EFA and room for 2+ nodes, a Kubeflow Trainer v2
`TrainingRuntime` (MPI policy: a launcher runs `mpirun`, every node runs sshd) and a `TrainJob` that runs
`all_reduce_perf` from NVIDIA's nccl-tests across `nodes` nodes, one process per GPU, with NCCL_DEBUG=INFO so the
log shows which network plugin NCCL chose. `parse(text)` reads that log; `verdict()` says pass or fail:
 - fail when nccl-tests counted wrong values (-c 1 validates every result) or reports out-of-bounds values;
 - fail when the log shows NCCL did not use the aws-ofi-nccl plugin over EFA (it falls back to TCP sockets);
 - fail when the bus bandwidth of the largest message is below the expectation, when one is known or given.
Neuron node groups are not rendered: nccl-tests is CUDA-only (Trainium's equivalent is the Neuron SDK's
`nccom-test`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mlstack.catalog import efa_layout
from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.errors import InputError
from mlstack.k8s.job import HUGEPAGES_2MI
from mlstack.k8s.kube import EFA_TAINT, LABEL_PREFIX, accelerator_resource, accelerator_taint_key

IMAGE_PLACEHOLDER = "SET-efa-acceptance-image"
"""Built from runtime/containers/nccl-tests.Dockerfile and pushed to the account's ECR."""
SSH_PATH = "/home/mpiuser/.ssh"
MIN_NODES = 2

EXPECTED_BUSBW_GBYTES: dict[str, tuple[float, str]] = {}
"""Instance type -> (all_reduce_perf bus bandwidth in GB/s at the largest size, 2 nodes, public source).

Empty on purpose: no public source with a reproducible 2-node all_reduce_perf number per instance type was
confirmed when this was written. `verdict()` then needs `expected_gbytes` from the user (for example the
number measured on the first healthy cluster), and always reports the fraction of the documented EFA line rate
(the catalog's EFA bandwidth: the ceiling busbw cannot exceed across nodes)."""

_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
    r"(?P<t1>[\d.]+)\s+(?P<alg1>[\d.]+)\s+(?P<bus1>[\d.]+)\s+(?P<wrong1>\S+)\s+"
    r"(?P<t2>[\d.]+)\s+(?P<alg2>[\d.]+)\s+(?P<bus2>[\d.]+)\s+(?P<wrong2>\S+)\s*$"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<avg>[\d.]+)", re.MULTILINE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<status>\w+)", re.MULTILINE)
_OFI = re.compile(r"NET/OFI Selected provider is (?P<provider>\S+?),?\s", re.IGNORECASE)
_SOCKET = re.compile(r"NET/Socket|Using network Socket", re.IGNORECASE)


@dataclass(frozen=True)
class Row:
    size: int
    busbw_out: float
    busbw_in: float
    wrong: int

    @property
    def busbw(self) -> float:
        return max(self.busbw_out, self.busbw_in)


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[Row, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    provider: str | None
    """The libfabric provider aws-ofi-nccl selected (`efa` on a healthy node), None when the log does not say."""
    sockets: bool
    """NCCL logged its TCP socket transport: EFA was not used."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    busbw: float
    expected: float | None
    line_rate: float | None
    reasons: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        parts = [f"busbw {self.busbw:.2f} GB/s at the largest size"]
        if self.line_rate:
            parts.append(f"{100 * self.busbw / self.line_rate:.0f}% of the {self.line_rate:.0f} GB/s EFA line rate")
        if self.expected is not None:
            parts.append(f"expected >= {self.expected:.2f} GB/s")
        head = "PASS" if self.passed else "FAIL"
        return f"{head}: " + "; ".join(parts) + "".join(f"\n  - {r}" for r in self.reasons)


def parse(text: str) -> NcclResult:
    """Read all_reduce_perf output (the launcher's log). Raises InputError when it holds no result row."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            wrong = sum(int(w) for w in (m["wrong1"], m["wrong2"]) if w.isdigit())
            rows.append(Row(int(m["size"]), float(m["bus1"]), float(m["bus2"]), wrong))
    if not rows:
        raise InputError("no nccl-tests result rows found: is this all_reduce_perf output (did the job finish)?")
    avg = _AVG.search(text)
    oob = _OOB.search(text)
    ofi = _OFI.search(text)
    return NcclResult(
        rows=tuple(rows),
        avg_busbw=float(avg["avg"]) if avg else None,
        out_of_bounds=int(oob["n"]) if oob else None,
        provider=ofi["provider"].lower() if ofi else None,
        sockets=bool(_SOCKET.search(text)),
    )


def verdict(result: NcclResult, *, instance_type: str, expected_gbytes: float | None = None) -> Verdict:
    """Pass or fail against the expectation (given, else EXPECTED_BUSBW_GBYTES; none: checks all but speed)."""
    from mlstack.catalog import get_instance

    it = get_instance(instance_type)
    line_rate = it.efa_gbps / 8 if it.efa_supported else None
    if expected_gbytes is None and instance_type in EXPECTED_BUSBW_GBYTES:
        expected_gbytes = EXPECTED_BUSBW_GBYTES[instance_type][0]
    largest = max(result.rows, key=lambda r: r.size)
    reasons = []
    wrong = sum(r.wrong for r in result.rows)
    if wrong:
        reasons.append(f"{wrong} wrong values counted by nccl-tests' validation: data corruption or a broken rank")
    if result.out_of_bounds:
        reasons.append(f"{result.out_of_bounds} out-of-bounds values reported")
    if result.sockets or (result.provider is not None and result.provider != "efa"):
        reasons.append(
            f"NCCL did not use EFA (provider {result.provider or 'none'}, sockets {result.sockets}): check the EFA "
            "device plugin, vpc.amazonaws.com/efa requests and the aws-ofi-nccl plugin in the image"
        )
    if expected_gbytes is not None and largest.busbw < expected_gbytes:
        reasons.append(f"busbw {largest.busbw:.2f} GB/s below the expected {expected_gbytes:.2f} GB/s")
    return Verdict(not reasons, largest.busbw, expected_gbytes, line_rate, tuple(reasons))


def _group_docs(config: BlueprintConfig, group: NodeGroupConfig, image: str) -> list[dict[str, Any]]:
    assert config.training is not None
    it = group.instance
    assert it.accelerator is not None
    gpus = it.accelerator.count
    nodes = group.max_size
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
        "mpirun", "--allow-run-as-root", "-np", str(nodes * gpus), "-npernode", str(gpus), "--bind-to", "none",
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_DEBUG=INFO",
        "/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-c", "1", "-n", "20",
    ]  # fmt: skip
    node_pod = {
        "nodeSelector": {f"{LABEL_PREFIX}/node-group": group.name},
        "tolerations": [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in taints],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        "containers": [
            {
                "name": "node",
                "image": image,
                "command": ["/usr/sbin/sshd", "-De"],
                "resources": {"requests": dict(resources), "limits": dict(resources)},
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            }
        ],
    }
    launcher_pod = {
        "containers": [
            {
                "name": "node",
                "image": image,
                "command": mpirun,
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            }
        ]
    }

    def replicated(job: str, pod: dict[str, Any]) -> dict[str, Any]:
        meta = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}} if job == "node" else {}
        return {"name": job, "template": {"metadata": meta, "spec": {"template": {"spec": pod}}}}

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
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [replicated("launcher", launcher_pod), replicated("node", node_pod)],
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


def acceptance_groups(config: BlueprintConfig) -> list[NodeGroupConfig]:
    """The node groups an nccl-tests run can check: GPU, EFA, at least two nodes."""
    if config.training is None:
        return []
    return [
        g
        for g in config.training.efa_groups
        if g.instance.accelerator is not None and g.instance.accelerator.kind == "gpu" and g.max_size >= MIN_NODES
    ]


def render_acceptance(config: BlueprintConfig, image: str = IMAGE_PLACEHOLDER) -> list[dict[str, Any]]:
    """TrainingRuntime + TrainJob per acceptance group (empty when the blueprint has none)."""
    return [doc for g in acceptance_groups(config) for doc in _group_docs(config, g, image)]
