"""The CloudWatch agent on an engine's own GPU hosts (Batch container instances, HyperPod Slurm nodes), read from
the template: the kernel-log group the stack creates for it and the namespace of the Xid metric filter on that
group, which is the namespace the agent publishes to (`mlstack.design.host_metrics`)."""

from __future__ import annotations

from mlstack.access.model import Facts
from mlstack.access.resolve import Stacks

STREAM = "ip-10-0-0-1"
"""A log stream as the agent names it (`{hostname}`)."""


def host_agent_facts(stacks: Stacks, stack: str) -> Facts:
    """{"host_agent": [{group, namespace, stream}]} for each kernel-log group of `stack` with its metric filter;
    {} when the stack has none (no agent on its hosts)."""
    resources = stacks.resources(stack)
    found = []
    for lid, r in resources.items():
        if r["Type"] != "AWS::Logs::MetricFilter":
            continue
        props = r["Properties"]
        group = stacks.text(stack, props["LogGroupName"])
        if not group.endswith("/host-kernel"):
            continue
        for transformation in props["MetricTransformations"]:
            namespace = stacks.text(stack, transformation["MetricNamespace"])
            found.append({"group": group, "namespace": namespace, "stream": STREAM, "filter": lid})
    return {"host_agent": found} if found else {}
