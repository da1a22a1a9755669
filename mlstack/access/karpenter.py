"""`mlstack access` for Karpenter: the facts of the calls its controller makes (`calls.KINDS["karpenter"]`) to
launch and drain a node (with its Pod Identity role), and the node role its nodes join with (an EKS access entry of
type EC2_LINUX, no node group).

The first job on a Karpenter pool: Kueue admits it, its pods are pending, and the controller resolves the AMI
(SSM), creates a launch template with the EC2NodeClass's network interfaces, creates an instance profile for the node
role and calls CreateFleet, passing the role; EC2 creates the encrypted root volume with the controller's grant on
the key; the node joins through the access entry. Every tag the conditions test is one Karpenter sets itself.
"""

from __future__ import annotations

import json

from mlstack.access.resolve import Stacks

KARPENTER_SERVICE_ACCOUNT = "karpenter"


def karpenter_pools(stacks: Stacks, stack: str, cluster: str) -> list[dict[str, str]]:
    """One fact per EC2NodeClass in `stack`: what the controller's calls name when it launches that pool's node."""
    ec2 = f"arn:aws:ec2:{stacks.region}:{stacks.account}"
    queues = [stacks.arn(stack, lid) for lid, r in stacks.resources(stack).items() if r["Type"] == "AWS::SQS::Queue"]
    facts: list[dict[str, str]] = []
    for _lid, r in stacks.resources(stack).items():
        if r["Type"] != "Custom::AWSCDK-EKS-KubernetesResource" or "EC2NodeClass" not in json.dumps(r["Properties"]):
            continue
        manifest = stacks.resolve(stack, r["Properties"]["Manifest"])
        docs = json.loads(manifest) if isinstance(manifest, str) else manifest
        for doc in docs:
            if doc.get("kind") != "EC2NodeClass":
                continue
            spec = doc["spec"]
            version = next(
                (
                    str(c["Properties"]["Version"])
                    for c in stacks.resources(stack).values()
                    if c["Type"] == "AWS::EKS::Cluster"
                ),
                "1.35",
            )
            facts.append(
                {
                    "pool": doc["metadata"]["name"],
                    "cluster": f"arn:aws:eks:{stacks.region}:{stacks.account}:cluster/{cluster}",
                    "cluster_name": cluster,
                    "version": version,
                    "node_role": f"arn:aws:iam::{stacks.account}:role/{spec['role']}",
                    "subnet": f"{ec2}:subnet/{spec['subnetSelectorTerms'][0]['id']}",
                    "security_group": (f"{ec2}:security-group/{spec['securityGroupSelectorTerms'][0]['id']}"),
                    "key": spec["blockDeviceMappings"][0]["ebs"]["kmsKeyID"],
                    "queue": queues[0] if queues else "arn:aws:sqs:{region}:{account}:none",
                }
            )
    return facts
