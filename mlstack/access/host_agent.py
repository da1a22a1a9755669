"""The CloudWatch agent on an engine's GPU hosts (Batch container instances, HyperPod nodes, EKS managed and
Karpenter nodes), read from the template: the kernel-log group the stack creates for it and the namespace of the
Xid metric filter on that group, which is the namespace the agent publishes to (`mlstack.design.host_metrics`);
which EKS nodes run it (their user data installs it)."""

from __future__ import annotations

import json
from typing import Any

from mlstack.access.model import Facts
from mlstack.access.resolve import Stacks

INSTALLER = "install_cloudwatch_agent.sh"
"""The installer's name in a node's user data (`mlstack.constructs.training.host_agent.host_agent_shell`)."""


def runs_host_agent(stacks: Stacks, stack: str, nodegroup: dict[str, Any]) -> bool:
    """A managed node group's launch template's user data installs the agent."""
    template = nodegroup.get("LaunchTemplate", {}).get("Id", {})
    lid = template.get("Ref") if isinstance(template, dict) else None
    resource = stacks.resources(stack).get(str(lid))
    if resource is None:
        return False
    return INSTALLER in json.dumps(resource["Properties"].get("LaunchTemplateData", {}).get("UserData", ""))


def pools_run_host_agent(stacks: Stacks, stack: str) -> bool:
    """Some Karpenter EC2NodeClass of the stack's manifests installs the agent in its `userData`."""
    return any(
        r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and "EC2NodeClass" in json.dumps(r["Properties"])
        and INSTALLER in json.dumps(r["Properties"])
        for r in stacks.resources(stack).values()
    )


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
