"""EFA acceptance test: what each engine runs (nccl-tests `all_reduce_perf` over every GPU of every node), and
the parser of its output.

`mlstack acceptance` renders, per GPU node group with EFA and room for 2+ nodes, what the blueprint's engine runs:
a Kubeflow Trainer MPI job on EKS and HyperPod-EKS (`nccl_k8s`), an `sbatch` script on HyperPod Slurm
(`nccl_slurm`), and a multi-node job definition with its `aws batch submit-job` on AWS Batch (`nccl_batch`). Each
runs with NCCL_DEBUG=INFO so the log shows which network plugin NCCL chose.

`parse(text)` reads the log as each engine hands it over: Slurm's output file, CloudWatch Logs (the JSON of
`aws logs get-log-events` / `filter-log-events`, or `aws logs tail` lines), `kubectl logs` (with or without
`--prefix`), or Open MPI's `--tag-output` lines. `verdict()` says pass or fail:
 - fail when nccl-tests counted wrong values (-c 1 validates every result) or reports out-of-bounds values;
 - fail when the log shows NCCL did not use the aws-ofi-nccl plugin over EFA (it falls back to TCP sockets);
 - fail when the bus bandwidth of the largest message is below the expectation, when one is known or given.
Neuron node groups are not rendered: nccl-tests is CUDA-only (Trainium's equivalent is the Neuron SDK's
`nccom-test`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.errors import InputError

IMAGE_PLACEHOLDER = "SET-efa-acceptance-image"
"""Built from runtime/containers/nccl-tests.Dockerfile and pushed to the account's ECR."""
MIN_NODES = 2
NCCL_TESTS_VERSION = "v2.16.4"
"""The NVIDIA/nccl-tests tag every engine builds (the Dockerfile's NCCL_TESTS_VERSION, the Slurm script's)."""
ALL_REDUCE_ARGS = ("-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-c", "1", "-n", "20")
"""8 B to 8 GiB, doubling; one GPU per process; validate every result (-c 1); 20 timed iterations."""

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
_PREFIXES = (
    re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+\S+\s"),  # aws logs tail
    re.compile(r"^\[pod/[^\]]+\]\s?"),  # kubectl logs --prefix
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\s*\d+:\s"),  # srun --label
)


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


def log_text(raw: str) -> str:
    """The plain output lines of a log in any shape the engines hand it over (see the module docstring)."""
    stripped = raw.lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except json.JSONDecodeError:
            document = None
        if isinstance(document, dict) and isinstance(document.get("events"), list):
            events = sorted(document["events"], key=lambda e: (e.get("timestamp", 0), e.get("eventId", "")))
            raw = "\n".join(str(e.get("message", "")).rstrip("\n") for e in events)
    lines = []
    for line in raw.splitlines():
        for prefix in _PREFIXES:
            line = prefix.sub("", line, count=1)
        lines.append(line)
    return "\n".join(lines)


def parse(text: str) -> NcclResult:
    """Read all_reduce_perf output in any engine's log shape. Raises InputError when it holds no result row."""
    text = log_text(text)
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


def acceptance_nodes(config: BlueprintConfig, group: NodeGroupConfig) -> int:
    """How many nodes of `group` the acceptance run spans: HyperPod runs `desired_size` instances; Batch starts
    the job's node count (`training.job.nodes`, default `max_size`); EKS scales the group up to `max_size`."""
    assert config.training is not None
    engine = config.training.engine
    if engine in ("hyperpod-slurm", "hyperpod-eks"):
        return group.desired_size
    if engine == "batch":
        return config.training.job.nodes or group.max_size
    return group.max_size


def acceptance_groups(config: BlueprintConfig) -> list[NodeGroupConfig]:
    """The node groups an nccl-tests run can check: GPU, EFA, at least two nodes."""
    if config.training is None:
        return []
    return [
        g
        for g in config.training.efa_groups
        if g.instance.accelerator is not None
        and g.instance.accelerator.kind == "gpu"
        and acceptance_nodes(config, g) >= MIN_NODES
    ]
