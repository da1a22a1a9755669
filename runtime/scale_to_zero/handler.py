"""Scale the training capacity to zero: on an expiring Capacity Block (EventBridge "Capacity Block Expiration
Warning": EC2 starts terminating the block's instances about 10 minutes later), or when a budget's actual cost
passes its scale-to-zero threshold (AWS Budgets notification through SNS).

- EKS managed node groups (`NODEGROUPS`, JSON list of names of cluster `CLUSTER_NAME`): min and desired size 0
  (UpdateNodegroupConfig; max size stays, EKS requires it to be at least 1). The node group drains its nodes: each
  job pod gets SIGTERM and the 300 s terminationGracePeriodSeconds the rendered job gives it (inside the 10
  minutes above). The launcher passes SIGTERM on to the ranks; the shipped train.py then saves the step in
  progress on every rank and exits with the restart code. The launcher waits for its ranks
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds (270, set on the pod) on every torch version before it SIGKILLs them.
- AWS Batch (`JOB_QUEUES`, `COMPUTE_ENVIRONMENTS`, JSON lists of ARNs): jobs of the queues that are submitted,
  pending, runnable, starting or running are terminated, and each compute environment is disabled: a disabled
  managed environment starts no instance and scales in to its minimum (0) once its instances are idle (AWS Batch
  User Guide, "Compute environment states"). A running container gets SIGTERM, then SIGKILL after the ECS
  agent's stop timeout (ECS_CONTAINER_STOP_TIMEOUT, 30 s by default, 300 s in the compute environment's user data;
  a Batch job definition has no setting for it): train.py saves the step in progress within the launcher's 270 s,
  else the job resumes from its newest periodic checkpoint.
- SageMaker HyperPod (`HYPERPOD_CLUSTER`, the cluster name; `HYPERPOD_GROUPS`, JSON list of its accelerated
  instance groups): UpdateCluster with those groups' InstanceCount 0. UpdateCluster takes every instance group of
  the cluster with its full specification (the SageMaker API Reference, UpdateCluster: InstanceGroups; a group left
  out is not deleted, only InstanceGroupsToDelete deletes one), so the request repeats each group's settings from
  DescribeCluster and changes only the count (InstanceCount and MinInstanceCount accept 0: the API's
  ClusterInstanceGroupSpecification); the controller, login and other groups keep theirs. HyperPod then removes
  the groups' nodes; a Slurm job on them is requeued (`--requeue` / auto-resume) and resumes from its newest
  checkpoint once the group is scaled back up.
- Karpenter NodePools (`NODEPOOLS`, JSON list of the accelerated pools of cluster `CLUSTER_NAME`, engine eks or
  HyperPod's managed Karpenter on hyperpod-eks), through the Kubernetes API at `KUBE_ENDPOINT` (the private
  endpoint, reached from the function's VPC subnets; `KUBE_CA`, the cluster's base64 CA data): each pool's
  `spec.limits` are set to "0" with a JSON merge patch, every key the pool has (its accelerator resource), so
  Karpenter launches no node for it ("If a limit has been exceeded, nodes provisioning is prevented until some
  nodes have been terminated", Karpenter docs v1.14, NodePools, spec.limits); a pool without limits gets cpu "0".
  Only keys the manifest has: `kubectl apply` of a changed manifest restores them, but keeps a key it never set.
  Then the pool's NodeClaims (label karpenter.sh/nodepool) are deleted, which "will cause cascade deletion" of the
  node, drained by Karpenter's termination controller (Karpenter docs v1.14, Disruption, "Manual Methods"). Job
  pods (karpenter.sh/do-not-disrupt, the job's PodDisruptionBudget) keep their node until the pool's
  terminationGracePeriod; Karpenter deletes them early enough to give their own 300 s grace period (NodePools,
  spec.template.spec.terminationGracePeriod), so train.py saves its step. A claim already being deleted is left
  to finish. The function authenticates with an EKS bearer token presigned locally from its own credentials
  (STS GetCallerIdentity with the signed `x-k8s-aws-id` header, what `aws eks get-token` makes; no network call)
  and may only get/patch these pools and list/delete NodeClaims (its access entry's Kubernetes group, bound to a
  ClusterRole).

With `NOTIFY_TOPIC_ARN`, what it did and what failed is published to that topic. Scaling back up is the
user's step: CloudFormation applies only properties that change, so `cdk deploy` with an unchanged template
leaves the node groups at 0, the compute environment DISABLED and the NodePools' limits at 0 (CDK's kubectl
handler runs `kubectl apply` only on an update of the manifest's resource).
Run `aws eks update-nodegroup-config --cluster-name <cluster> --nodegroup-name <group> --scaling-config
minSize=<min>,desiredSize=<desired>,maxSize=<max>` for each node group, or `aws batch
update-compute-environment --compute-environment <arn> --state ENABLED`, or `aws sagemaker update-cluster` with the
groups' counts (the HyperPod console's "Edit" does the same), or, for a NodePool, the `kubectl patch nodepool`
command the message names (its limits before), or change the blueprint (sizes, a new block) and deploy. Runs
with the function's role only; every call is idempotent.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import boto3

BATCH_STATES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
HYPERPOD_SAME = (
    "InstanceGroupName", "InstanceType", "LifeCycleConfig", "ExecutionRole", "ThreadsPerCore",
    "InstanceStorageConfigs", "OnStartDeepHealthChecks", "TrainingPlanArn", "OverrideVpcConfig",
    "ScheduledUpdateConfig", "SlurmConfig", "CapacityRequirements", "NetworkInterface",
)  # fmt: skip
"""DescribeCluster's ClusterInstanceGroupDetails members that UpdateCluster's ClusterInstanceGroupSpecification
takes under the same name and with the same shape (botocore's SageMaker model). The others are mapped in
`hyperpod_spec` (counts, image, and the Current*/Desired* pairs of KubernetesConfig, InstanceRequirements and
AutoPatchConfig) or are read-only status (Status, TrainingPlanStatus, ActiveOperations, SoftwareUpdateStatus, ...)."""


def _names(variable: str) -> list[str]:
    value = json.loads(os.environ.get(variable) or "[]")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{variable} must be a JSON list of strings, got {value!r}")
    return value


def _desired(details: dict[str, Any], name: str) -> Any:
    """The Desired<name> of a DescribeCluster detail (what the group is moving to), else its Current<name>."""
    return details.get(f"Desired{name}", details.get(f"Current{name}"))


def _custom_image(group: dict[str, Any]) -> str | None:
    """The group's AMI when it is a custom one. A HyperPod-managed AMI comes with its release version
    (Current/DesiredImageReleaseVersion); "default" is no AMI at all. Left out, UpdateCluster keeps the group on
    the HyperPod-managed image, as CloudFormation's own updates of a cluster created without ImageId do."""
    image = group.get("DesiredImageId") or group.get("CurrentImageId")
    managed = group.get("DesiredImageReleaseVersion") or group.get("CurrentImageReleaseVersion")
    return image if image and image.startswith("ami-") and not managed else None


def hyperpod_spec(group: dict[str, Any], zero: bool) -> dict[str, Any]:
    """UpdateCluster's ClusterInstanceGroupSpecification for a described group: its settings as they are (or as
    they are being changed to), with InstanceCount and MinInstanceCount 0 when `zero`."""
    spec = {key: group[key] for key in HYPERPOD_SAME if key in group}
    types = _desired(group.get("InstanceRequirements") or {}, "InstanceTypes")
    if types:
        spec["InstanceRequirements"] = {"InstanceTypes": types}
    kubernetes = group.get("KubernetesConfig") or {}
    mapped = {key: _desired(kubernetes, key) for key in ("Labels", "Taints")}
    if any(value is not None for value in mapped.values()):
        spec["KubernetesConfig"] = {key: value for key, value in mapped.items() if value is not None}
    patch = group.get("AutoPatchConfig")
    if patch:
        spec["AutoPatchConfig"] = {
            k: v for k, v in patch.items() if k not in ("CurrentPatchSchedule", "DesiredPatchSchedule")
        }
        if _desired(patch, "PatchSchedule"):
            spec["AutoPatchConfig"]["PatchSchedule"] = _desired(patch, "PatchSchedule")
    spec["InstanceCount"] = 0 if zero else int(group.get("TargetCount", group.get("CurrentCount", 0)))
    if "MinCount" in group:
        spec["MinInstanceCount"] = 0 if zero else int(group["MinCount"])
    image = _custom_image(group)
    if image:
        spec["ImageId"] = image
    return spec


def hyperpod_groups(described: list[dict[str, Any]], to_zero: set[str]) -> list[dict[str, Any]]:
    """UpdateCluster's InstanceGroups: every described group as it is, the groups in `to_zero` with count 0."""
    return [hyperpod_spec(group, group["InstanceGroupName"] in to_zero) for group in described]


def _trigger(event: dict[str, Any]) -> str:
    """What asked for the scale-down, in a few words: the Capacity Block, or the budget notification's subject."""
    records = event.get("Records") or []
    if records and isinstance(records[0], dict) and "Sns" in records[0]:
        sns = records[0]["Sns"]
        return str(sns.get("Subject") or "AWS Budgets notification")
    return f"Capacity Block {event.get('detail', {}).get('capacity-reservation-id', '?')} expiring"


def _nodegroups(done: list[str], trigger: str) -> None:
    nodegroups = _names("NODEGROUPS")
    if nodegroups:
        eks = boto3.client("eks")
        cluster = os.environ["CLUSTER_NAME"]
        for name in nodegroups:
            scaling = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]["scalingConfig"]
            eks.update_nodegroup_config(
                clusterName=cluster,
                nodegroupName=name,
                scalingConfig={"minSize": 0, "desiredSize": 0, "maxSize": max(1, int(scaling.get("maxSize", 1)))},
            )
            done.append(f"nodegroup {name}: 0 nodes")


def _batch(done: list[str], trigger: str) -> None:
    queues, environments = _names("JOB_QUEUES"), _names("COMPUTE_ENVIRONMENTS")
    if queues or environments:
        batch = boto3.client("batch")
        for queue in queues:
            for state in BATCH_STATES:
                for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus=state):
                    for job in page.get("jobSummaryList", []):
                        batch.terminate_job(jobId=job["jobId"], reason=f"mlstack: {trigger}"[:255])
                        done.append(f"job {job['jobId']}: terminated")
        for environment in environments:
            batch.update_compute_environment(computeEnvironment=environment, state="DISABLED")
            done.append(f"compute environment {environment}: disabled")


def _hyperpod(done: list[str], trigger: str) -> None:
    hyperpod, groups = os.environ.get("HYPERPOD_CLUSTER"), set(_names("HYPERPOD_GROUPS"))
    if hyperpod and groups:
        sagemaker = boto3.client("sagemaker")
        described = sagemaker.describe_cluster(ClusterName=hyperpod)["InstanceGroups"]
        present = {g["InstanceGroupName"] for g in described}
        sagemaker.update_cluster(ClusterName=hyperpod, InstanceGroups=hyperpod_groups(described, groups))
        done += [f"HyperPod {hyperpod} group {g}: 0 instances" for g in sorted(groups & present)]


TOKEN_PREFIX = "k8s-aws-v1."
KARPENTER = "/apis/karpenter.sh/v1"
POOL_LABEL = "karpenter.sh/nodepool"
LIMITS_BEFORE = "mlstack.io/limits-before-scale-to-zero"
"""The annotation on a stopped NodePool with its limits before (JSON): what the resume command gives back."""


def eks_token(cluster: str, region: str) -> str:
    """An EKS bearer token for the function's credentials: a GET of STS GetCallerIdentity presigned with the
    cluster name in the signed `x-k8s-aws-id` header, base64url without padding (what `aws eks get-token` makes).
    Signing is local: no network call."""
    from botocore.signers import RequestSigner

    # The regional STS endpoint of the region's partition (the China regions' DNS suffix differs).
    host = f"sts.{region}.amazonaws.com" + (".cn" if region.startswith("cn-") else "")
    session = boto3.session.Session(region_name=region)
    sts = session.client("sts", region_name=region, endpoint_url=f"https://{host}")
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(), session.events
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://{host}/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class Kube:
    """The few Kubernetes API requests the pool step makes, over HTTPS verified against the cluster's CA."""

    def __init__(self, endpoint: str, ca_data: str, token: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.endpoint + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=20) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode(errors="replace")
            raise RuntimeError(f"{method} {path}: HTTP {error.code} {detail}") from error

    def nodeclaims(self, pool: str) -> list[dict[str, Any]]:
        selector = urllib.parse.quote(f"{POOL_LABEL}={pool}")
        found: list[dict[str, Any]] = []
        after = ""
        while True:
            page = self.request("GET", f"{KARPENTER}/nodeclaims?labelSelector={selector}&limit=100{after}")
            found += page.get("items") or []
            more = (page.get("metadata") or {}).get("continue")
            if not more:
                return found
            after = "&continue=" + urllib.parse.quote(more)


def _pools(done: list[str], trigger: str) -> None:
    pools = _names("NODEPOOLS")
    if not pools:
        return
    cluster = os.environ["CLUSTER_NAME"]
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kube = Kube(os.environ["KUBE_ENDPOINT"], os.environ["KUBE_CA"], eks_token(cluster, region))
    for name in pools:
        path = f"{KARPENTER}/nodepools/{urllib.parse.quote(name)}"
        pool = kube.request("GET", path)
        limits: dict[str, str] = (pool.get("spec") or {}).get("limits") or {}
        grace = ((pool.get("spec") or {}).get("template") or {}).get("spec", {}).get("terminationGracePeriod")
        zero = dict.fromkeys(limits, "0") or {"cpu": "0"}
        if {key: str(limits.get(key)) for key in zero} != zero:
            before = {key: value for key, value in limits.items() if str(value) != "0"}
            # The limits before go on the pool itself, so that a retry (or a later notification) still names them.
            patch = {"metadata": {"annotations": {LIMITS_BEFORE: json.dumps(before)}}, "spec": {"limits": zero}}
            kube.request("PATCH", path, patch, "application/merge-patch+json")
            done.append(f"NodePool {name}: limits {json.dumps(limits)} -> 0, no new node ({_resume(name, before)})")
        else:
            annotations = (pool.get("metadata") or {}).get("annotations") or {}
            stopped_here = LIMITS_BEFORE in annotations  # by this function: the annotation names what to give back
            before = json.loads(annotations.get(LIMITS_BEFORE) or "{}")
            done.append(f"NodePool {name}: limits already 0" + (f" ({_resume(name, before)})" if stopped_here else ""))
        drain = (
            f"a node running a job drains when the job ends, at the latest after the pool's terminationGracePeriod "
            f"{grace}"
            if grace
            else "a node running a job drains when the job ends"
        )
        for claim in kube.nodeclaims(name):
            claim_name = claim["metadata"]["name"]
            if claim["metadata"].get("deletionTimestamp"):
                done.append(f"NodeClaim {claim_name}: already draining")
                continue
            try:
                kube.request("DELETE", f"{KARPENTER}/nodeclaims/{urllib.parse.quote(claim_name)}")
            except RuntimeError as error:
                if "HTTP 404" not in str(error):  # gone meanwhile: what the step wants
                    raise
            done.append(f"NodeClaim {claim_name}: deleted (Karpenter drains and terminates its node; {drain})")


def _resume(pool: str, before: dict[str, str]) -> str:
    resume = json.dumps({"spec": {"limits": before or {"cpu": None}}}, separators=(",", ":"))
    return f"resume: kubectl patch nodepool {pool} --type merge -p '{resume}'"


STEPS = {
    # The pools first: no node launches for the requeued job while the other steps run.
    "Karpenter NodePools": _pools,
    "EKS node groups": _nodegroups,
    "AWS Batch": _batch,
    "SageMaker HyperPod": _hyperpod,
}


def handler(event: dict[str, Any], context: object = None) -> dict[str, list[str]]:
    """Every step runs even when one before it fails; the message names what failed, and the invocation then
    fails too (Lambda retries an asynchronous invocation twice, and the function's Errors alarm tells the alarm
    topic when it cannot even publish, e.g. on a timeout)."""
    trigger = _trigger(event)
    done: list[str] = []
    failed: list[str] = []
    for what, step in STEPS.items():
        try:
            step(done, trigger)
        except Exception as error:  # reported below, then raised
            failed.append(f"{what} FAILED: {type(error).__name__}: {error}")
    print(json.dumps({"trigger": trigger, "done": done, "failed": failed}))
    topic = os.environ.get("NOTIFY_TOPIC_ARN")
    if topic:
        boto3.client("sns").publish(
            TopicArn=topic,
            Subject="mlstack: scale to zero FAILED" if failed else "mlstack: training capacity scaled to zero",
            Message=f"{trigger}: " + ("; ".join(failed + done) or "nothing was running"),
        )
    if failed:
        raise RuntimeError("; ".join(failed))
    return {"done": done}
