"""CloudFormation custom resource (CDK Provider framework): wait until a HyperPod cluster's autoscaling is in service.

HyperPod installs its managed Karpenter and the HyperpodNodeClass CRD only once DescribeCluster's
`AutoScaling.Status` (ClusterAutoScalingConfigOutput: Creating | InService | Failed | Deleting; SageMaker API
Reference) is InService, which is tracked apart from the cluster's own status ("Create a NodeClass", SageMaker
HyperPod docs). A manifest of HyperpodNodeClasses applied before that fails with `no matches for kind`, and CDK's
kubectl apply handler does not retry it. `on_event` only names the resource; the framework then calls
`is_complete` every query interval (both read the cluster's name from the function's environment,
`HYPERPOD_CLUSTER`) until it answers IsComplete (or its total timeout passes): InService completes,
Failed raises with the service's FailureMessage (the deploy fails with it), anything else waits. Delete waits for
nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

import boto3


def on_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    return {"PhysicalResourceId": f"{os.environ['HYPERPOD_CLUSTER']}-autoscaling-ready"}


def is_complete(event: dict[str, Any], context: Any, client: Any = None) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    name = os.environ["HYPERPOD_CLUSTER"]
    sagemaker = client or boto3.client("sagemaker")
    described = sagemaker.describe_cluster(ClusterName=name)
    scaling = described.get("AutoScaling") or {}
    status = scaling.get("Status")
    # One line per check in the handler's log group: what the deploy is waiting on.
    print(json.dumps({"cluster": name, "cluster_status": described.get("ClusterStatus"), "autoscaling": status}))
    if scaling.get("Mode") == "Disable":
        raise RuntimeError(f"HyperPod cluster {name}: autoscaling is disabled (AutoScaling.Mode Disable)")
    if status == "InService":
        return {"IsComplete": True, "Data": {"Status": status}}
    if status == "Failed" or described.get("ClusterStatus") == "Failed":
        message = scaling.get("FailureMessage") or described.get("FailureMessage") or "no failure message"
        raise RuntimeError(f"HyperPod cluster {name}: autoscaling {status or 'not started'}: {message}")
    return {"IsComplete": False, "Data": {"Status": status or "none"}}
