"""A vLLM server over several nodes, without the CDK: the flags and the Ray cluster its pods form.

vLLM's multi-node recipe (vLLM docs, "Parallelism and Scaling" and "LWS"): a Ray cluster whose head runs on the
leader pod and whose workers join it from the other pods of the group, then `vllm serve` on the leader with
`--tensor-parallel-size` = the GPUs of one node, `--pipeline-parallel-size` = the nodes and the Ray executor.
The leader's script waits until every node has joined (vLLM places its workers on the Ray cluster as it finds it
at start), as upstream's `examples/online_serving/multi-node-serving.sh` does.
"""

from __future__ import annotations

__all__ = [
    "MULTINODE_START_S",
    "RAY_OBJECT_STORE_BYTES",
    "RAY_PORT",
    "leader_script",
    "multinode_args",
    "worker_script",
]

RAY_PORT = 6379
"""The Ray head's GCS port on the leader (Ray's default)."""
RAY_OBJECT_STORE_BYTES = 4 * 1024**3
"""Ray's object store on each pod (`ray start --object-store-memory`): it lives in /dev/shm, which the pod mounts at
`mlstack.k8s.vllm.SHM_GIB` (16 GiB, shared with NCCL); Ray's default, 30% of the container's memory limit (~23 GiB
of 76 GiB), does not fit and Ray falls back to /tmp (Ray docs, "Memory Management: Object store"). vLLM passes
activations between the stages over NCCL, not the object store, so a few GiB suffice."""
MULTINODE_START_S = 600
"""Startup allowance a group adds: the leader serves only once every worker has pulled the image and joined."""


def multinode_args(nodes: int) -> list[str]:
    """The flags a multi-node server adds to the single-node ones."""
    return ["--pipeline-parallel-size", str(nodes), "--distributed-executor-backend", "ray"]


def leader_script(serve: str) -> str:
    """Start the Ray head (or exit: a container that fails restarts the group, `RecreateGroupOnPodRestart`, while a
    `vllm serve` without the head would start a private one-node Ray and hang on the pipeline's placement group),
    wait for the group's `LWS_GROUP_SIZE` nodes (LeaderWorkerSet sets it in every pod), then run `serve` (the
    single-node server's command, which execs `vllm serve "$@"`)."""
    count = (
        "python3 -c \"import ray; ray.init(address='auto', logging_level='ERROR'); "
        "print(sum(1 for n in ray.nodes() if n['Alive']))\""
    )
    return (
        f"ray start --head --port={RAY_PORT} --include-dashboard=false --disable-usage-stats "
        f"--object-store-memory={RAY_OBJECT_STORE_BYTES} || exit 1; "
        f'until [ "$({count} 2>/dev/null || echo 0)" -ge "$LWS_GROUP_SIZE" ]; do '
        'echo "waiting for $LWS_GROUP_SIZE Ray nodes"; sleep 5; done; '
        f"{serve}"
    )


def worker_script() -> str:
    """Join the leader's Ray head (`LWS_LEADER_ADDRESS`, set by LeaderWorkerSet) and stay in the foreground; retry
    while the head is not up yet."""
    return (
        f'until ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --disable-usage-stats '
        f"--object-store-memory={RAY_OBJECT_STORE_BYTES} --block; do "
        'echo "Ray head not reachable yet"; sleep 5; done'
    )
