"""What the training job does on a failure, on every engine: restart on infrastructure, fail on its own errors.

No CDK import: the Kubernetes renderers (`mlstack.k8s.job`, `mlstack.k8s.pytorchjob`), the Batch job definition
and the plan read it. The reference script (runtime/workloads/train.py) and its launcher
(runtime/workloads/elastic.py) exit with `APP_ERROR_EXIT` for an error of the script itself and with 1 when a
worker was killed or a peer was lost; the policies below restart on the second and fail on the first. Each
restart resumes from the newest complete checkpoint on FSx (`checkpoint_dir`), written every `CHECKPOINT_EVERY`
steps, the newest `KEEP_CHECKPOINTS` kept.
"""

from __future__ import annotations

from typing import Any

from mlstack.config.training import SHIPPED_SCRIPT, TrainingConfig

APP_ERROR_EXIT = 42
"""runtime/workloads/elastic.py's APP_ERROR_EXIT (the runtime folder is not importable from the package; a test
holds the two equal)."""
LAUNCHER = SHIPPED_SCRIPT.rsplit("/", 1)[0] + "/elastic.py"
"""Where the training image puts the launcher (torchrun with the exit codes above), next to the script."""
CHECKPOINT_EVERY = 100
"""Steps between checkpoints of the shipped script: a restart repeats at most this many steps."""
KEEP_CHECKPOINTS = 3
"""Complete checkpoints kept on FSx (and, through an exporting data repository, in S3); older ones are deleted."""
FSX_MOUNT = "/fsx"
TERMINATION_GRACE_S = 300
"""The job pods' terminationGracePeriodSeconds: how long a drained pod has between SIGTERM and SIGKILL (Kubernetes
default 30 s). On SIGTERM train.py saves the step in progress on every rank and exits with 1 (restart and
resume). 300 s fits inside the warnings that precede the capacity going away: a Capacity Block's expiration
warning 40 minutes before its end, a Spot interruption notice's 2 minutes aside (those nodes do not wait)."""
SHUTDOWN_TIMEOUT_S = TERMINATION_GRACE_S - 30
"""The launcher's wait for its workers after the SIGTERM it passes on, before it SIGKILLs them
(TORCH_ELASTIC_SHUTDOWN_TIMEOUT, which runtime/workloads/elastic.py reads on every torch; torchrun itself reads it
only in releases after the image's 2.7.1, which waits a fixed 30 s): inside the pod's grace period (and the ECS
agent's stop timeout on Batch), with time left for the launcher."""

DISRUPTION_RESTARTS = 10
"""Restarts a job's disruptions (drain, eviction, preemption, a node taken away) may cost on top of
`job.max_retries`. JobSet v0.12.0 keeps one counter for its counted restarts (status restartsCountTowardsMax, against
failurePolicy.maxRestarts) and no count per rule; its uncounted action (RestartJobSetAndIgnoreMaxRestarts) restarts
without bound, so a job on a node that keeps being drained (node auto-repair replacing a node again and again, a
capacity that keeps being reclaimed) would loop forever. Disruptions are counted instead and the limit raised by
this many: the job fails after max_retries + 10 restarts of any kind, so crashes alone may be retried up to that
total (the plan says so)."""
DISRUPTION_RULE = "infrastructure"
APP_ERROR_RULE = "applicationError"


def checkpoint_dir(training: TrainingConfig, job: str | None = None) -> str:
    """The job's checkpoint directory on FSx, `job` (default `training.job.name`) being a name or a shell variable.

    With a data repository association the directory is below its file system path, so that the association's
    automatic export (AutoExportPolicy, NEW/CHANGED/DELETED by default) copies each checkpoint to S3 and deletes
    the pruned ones there too (FSx for Lustre User Guide, "Automatically export updates to your S3 bucket");
    elsewhere on the file system nothing is exported."""
    assert training.fsx is not None
    repo = training.fsx.data_repository
    base = FSX_MOUNT + (repo.file_system_path.rstrip("/") if repo is not None else "")
    return f"{base}/checkpoints/{job or training.job.name}"


def checkpoint_args(training: TrainingConfig, job: str | None = None) -> list[str]:
    """train.py's checkpoint flags (none without FSx: nowhere shared to resume from)."""
    if training.fsx is None:
        return []
    return [
        "--checkpoint-dir", checkpoint_dir(training, job), "--checkpoint-every", str(CHECKPOINT_EVERY),
        "--keep-checkpoints", str(KEEP_CHECKPOINTS), "--resume",
    ]  # fmt: skip


def launcher(training: TrainingConfig) -> list[str]:
    """The command that starts torchrun: the launcher for the shipped script, torchrun itself for a user's own
    script (whose image need not have the launcher; it then exits 1 on every failure, which restarts)."""
    return ["python", LAUNCHER] if training.job.script == SHIPPED_SCRIPT else ["torchrun"]


def pod_failure_policy(container: str) -> dict[str, Any]:
    """The Job's `podFailurePolicy` (Kubernetes docs, "Handling retriable and non-retriable pod failures with Pod
    failure policy"; batch/v1 PodFailurePolicyRule): the job fails at once when the training container exits with
    `APP_ERROR_EXIT`, and also when the pod is disrupted (condition DisruptionTarget: drain, preemption, a node
    taken away by the node lifecycle controller or pod garbage collection), so that the JobSet restarts every pod
    without counting it. Rules are evaluated in order; the failure message names the rule that matched."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": container, "operator": "In", "values": [APP_ERROR_EXIT]},
            },
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def jobset_failure_policy(max_restarts: int) -> dict[str, Any]:
    """The JobSet `failurePolicy` (JobSet docs, "Failure Policy"; jobset v1alpha2 FailurePolicyRule): a
    disruption restarts the whole JobSet (RestartJobSet, counted: see `DISRUPTION_RESTARTS`), an application error
    fails it (FailJobSet), anything else (a worker killed, a peer lost, OOM) restarts it (no rule matches:
    RestartJobSet), `max_restarts` + `DISRUPTION_RESTARTS` times in all. Both rules need
    `onJobFailureMessagePatterns` because a pod failure policy gives every Job it fails the one reason
    `PodFailurePolicy`; the patterns match the Job controller's messages
    "Pod <ns>/<name> has condition DisruptionTarget matching FailJob rule at index 1" and "Container <c> for pod
    <ns>/<name> failed with exit code 42 matching FailJob rule at index 0" (the JobSet KEP 262's own example of
    this split). Recreate restarts all Jobs: every node of a torchrun job must start again together."""
    return {
        "maxRestarts": max_restarts + DISRUPTION_RESTARTS,
        "restartStrategy": "Recreate",
        "rules": [
            {
                "name": DISRUPTION_RULE,
                "action": "RestartJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [".*condition DisruptionTarget.*"],
            },
            {
                "name": APP_ERROR_RULE,
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [f".*failed with exit code {APP_ERROR_EXIT} matching.*"],
            },
        ],
    }


def graceful_stop(pod: dict[str, Any]) -> None:
    """Give the job's pod the time to checkpoint on SIGTERM: `TERMINATION_GRACE_S` for the pod, and
    `SHUTDOWN_TIMEOUT_S` for the launcher's wait on its workers (an environment variable: a plain torchrun of a
    version without the setting, 2.7.1 included, ignores it and keeps its 30 s)."""
    pod["terminationGracePeriodSeconds"] = TERMINATION_GRACE_S
    for container in pod["containers"]:
        container.setdefault("env", []).append(
            {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(SHUTDOWN_TIMEOUT_S)}
        )
