"""How a vLLM server stops without cutting a request (`mlstack.design.serving_pools`: why, and the timings): the
container's preStop hook and the pod's grace period. No CDK import.

The hook runs `DRAIN_SCRIPT` on the server image's own Python (the vLLM images are Python images; the script uses
the standard library only): it sleeps `DRAIN_DELAY_S` while the Service stops sending the pod new connections, then
reads the server's `/metrics` until `vllm:num_requests_running` and `vllm:num_requests_waiting` are 0 twice in a
row, at most `drain_seconds`; the kubelet sends SIGTERM when it returns (Kubernetes docs, "Container Lifecycle
Hooks": PreStop completes before the TERM signal is sent). The Neuron vLLM image serves the same `/metrics` (vLLM's
own OpenAI server; the Neuron plugin changes the model runner, not the frontend).

The workers of a multi-node server (`mlstack.k8s.vllm_multinode`) hold pipeline stages of the leader's requests:
their hook reads the leader's `/metrics` (`LEADER_ENV`, the address LeaderWorkerSet sets in every pod), so a group
that is deleted keeps its workers until the leader has drained.
"""

from __future__ import annotations

from typing import Any

from mlstack.design.serving_eks import PORT, ServerDesign
from mlstack.design.serving_pools import DRAIN_DELAY_S, drain_seconds, termination_grace_seconds

__all__ = ["DRAIN_SCRIPT", "LEADER_ENV", "drain_lifecycle", "termination_grace_seconds"]

LEADER_ENV = "LWS_LEADER_ADDRESS"

DRAIN_SCRIPT = """\
import os, re, sys, time, urllib.request
delay, budget, port = (int(a) for a in sys.argv[1:4])
host = os.environ.get(sys.argv[4], "") if len(sys.argv) > 4 else "127.0.0.1"
time.sleep(delay)
deadline = time.monotonic() + budget
busy = re.compile(r"^vllm:num_requests_(?:running|waiting)(?:\\{[^}]*\\})? ([0-9.eE+-]+)$", re.M)
idle = 0
while idle < 2 and time.monotonic() < deadline:
    try:
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    except (OSError, ValueError):
        break
    idle = idle + 1 if sum(float(v) for v in busy.findall(text)) == 0 else 0
    time.sleep(1)
"""
"""Wait for the endpoint to leave the Service, then for the server's queue to empty (argv: delay, budget, port and
optionally the environment variable holding the server's host, else this pod). A server that no longer answers
(or no host: urllib's ValueError) has nothing left to drain."""


def drain_lifecycle(design: ServerDesign, *, leader: bool = False) -> dict[str, Any]:
    """The server container's `lifecycle`: the preStop drain of `DRAIN_SCRIPT`; with `leader`, of the leader's
    server (a multi-node worker)."""
    command = ["python3", "-c", DRAIN_SCRIPT, str(DRAIN_DELAY_S), str(drain_seconds(design)), str(PORT)]
    if leader:
        command.append(LEADER_ENV)
    return {"preStop": {"exec": {"command": command}}}
