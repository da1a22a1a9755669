"""The calls of mlstack's own Lambda handlers (`runtime/`), and the SageMaker resources a handler creates.

A function is recognised by its handler and the environment its construct gives it; a function with another
handler (CDK's custom-resource providers) runs at deploy time only and is no run-time principal. The calls
follow the handler code: `runtime/approval_deploy/handler.py`, `runtime/invoke/handler.py`,
`runtime/ai_services/api_handler.py`, `runtime/ai_services/doc_pipeline/tasks.py`, `runtime/scale_to_zero/handler.py`,
`runtime/hyperpod_ready/handler.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from mlstack.access.model import Facts, merge
from mlstack.access.principals import Finder

# `OPERATIONS` names of the AI-services API handler -> the IAM action each makes (resource "*" unless below).
API_OPERATIONS = {
    "comprehend.sentiment": "comprehend:DetectSentiment",
    "comprehend.entities": "comprehend:DetectEntities",
    "comprehend.pii": "comprehend:DetectPiiEntities",
    "translate.text": "translate:TranslateText",
    "rekognition.labels": "rekognition:DetectLabels",
    "rekognition.moderation": "rekognition:DetectModerationLabels",
    "rekognition.text": "rekognition:DetectText",
    "textract.analyze": "textract:AnalyzeDocument",
    "transcribe.start": "transcribe:StartTranscriptionJob",
    "bedrock.converse": "bedrock:InvokeModel",
}


def kind_of(handler: str, env: dict[str, Any]) -> str | None:
    if handler == "handler.handler" and "MODEL_ROLE_ARN" in env:
        return "approval-deploy"
    if handler == "handler.handler" and "INVOKE_TIMEOUT_SECONDS" in env:
        return "invoke"
    if handler == "handler.handler" and "NODEGROUPS" in env and "COMPUTE_ENVIRONMENTS" in env:
        return "scale-to-zero"
    if handler == "api_handler.handler":
        return "ai-api"
    if handler.startswith("tasks."):
        return "doc-" + handler.split(".", 1)[1]
    if handler in ("handler.on_event", "handler.is_complete") and set(env) == {"HYPERPOD_CLUSTER"}:
        # The HyperPod autoscaling wait (runtime/hyperpod_ready/handler.py): DescribeCluster on its cluster.
        return "hyperpod-ready"
    if handler == "handler.on_event":
        # The HyperPod chart installer (runtime/hyperpod_chart/handler.py): a deploy-time function whose failure
        # fails the deploy. Its own AWS calls are the generic function ones (logs, VPC interfaces): it reaches
        # Kubernetes through its EKS access entry (RBAC, not IAM) and signs sts:GetCallerIdentity, which needs no
        # permission (AWS STS API reference, GetCallerIdentity).
        return "hyperpod-chart"
    return None


def _call(action: str, resource: str, source: str = "sar") -> dict[str, str]:
    return {"action": action, "resource": resource, "source": source}


def _function(facts: Facts) -> tuple[str, dict[str, Any]]:
    item = facts["function"][0]
    return item["kind"], json.loads(item["env"])


def handler_calls(finder: Finder, facts: Facts) -> Iterator[tuple[str, str, Facts]]:
    kind, env = _function(facts)
    region, account = finder.stacks.region, finder.stacks.account
    sm = f"arn:aws:sagemaker:{region}:{account}"
    calls: list[dict[str, str]] = []
    if kind == "invoke":
        calls.append(_call("sagemaker:InvokeEndpoint", f"{sm}:endpoint/{env['ENDPOINT_NAME'].lower()}", "sm-api"))
    elif kind == "approval-deploy":
        endpoint, group = env["ENDPOINT_NAME"].lower(), env["MODEL_PACKAGE_GROUP"].lower()
        name = f"{endpoint}-v1-0a1b2c"  # the handler appends a hash of its deploy settings
        for action, resource in (
            ("DescribeModelPackage", f"model-package/{group}/1"),
            ("DescribeEndpoint", f"endpoint/{endpoint}"),
            ("DescribeModel", f"model/{name}"),
            ("CreateModel", f"model/{name}"),
            ("DescribeEndpointConfig", f"endpoint-config/{name}"),
            ("CreateEndpointConfig", f"endpoint-config/{name}"),
            ("CreateEndpoint", f"endpoint/{endpoint}"),
            ("UpdateEndpoint", f"endpoint/{endpoint}"),
            ("AddTags", f"endpoint/{endpoint}"),
            ("DescribeDataQualityJobDefinition", f"data-quality-job-definition/{endpoint}-dq1-0a1b2c"),
            ("CreateDataQualityJobDefinition", f"data-quality-job-definition/{endpoint}-dq1-0a1b2c"),
            ("DescribeMonitoringSchedule", f"monitoring-schedule/{endpoint}-data-quality"),
            ("CreateMonitoringSchedule", f"monitoring-schedule/{endpoint}-data-quality"),
            ("UpdateMonitoringSchedule", f"monitoring-schedule/{endpoint}-data-quality"),
        ):
            calls.append(_call(f"sagemaker:{action}", f"{sm}:{resource}", "sm-api"))
        for role in (env["MODEL_ROLE_ARN"], env["MONITOR_ROLE_ARN"]):
            calls.append(_call("iam:PassRole", role, "sm-api"))
    elif kind == "ai-api":
        for operation in env["OPERATIONS"].split(","):
            api_action = API_OPERATIONS.get(operation)
            if api_action == "bedrock:InvokeModel":
                for model in env["BEDROCK_MODEL_IDS"].split(","):
                    model_arn = f"arn:aws:bedrock:{region}::foundation-model/{model}"
                    calls.append(_call(api_action, model_arn, "bedrock-invoke"))
            elif api_action is not None:
                calls.append(_call(api_action, "*"))
    elif kind.startswith("doc-"):
        bucket = f"arn:aws:s3:::{env['BUCKET']}"
        work, results, failed, inputs = (
            env[k] for k in ("WORK_PREFIX", "RESULTS_PREFIX", "FAILED_PREFIX", "INPUT_PREFIX")
        )
        task = kind.removeprefix("doc-")
        if task == "start_analysis":
            calls += [
                _call("textract:StartDocumentTextDetection", "*"),
                _call("s3:GetObject", f"{bucket}/{inputs}doc.pdf", "textract-s3"),
            ]
        elif task == "check_analysis":
            calls += [
                _call("textract:GetDocumentTextDetection", "*"),
                _call("s3:PutObject", f"{bucket}/{work}doc.pdf.txt"),
            ]
        elif task == "extract_chunk":
            calls += [
                _call("s3:GetObject", f"{bucket}/{work}doc.pdf.txt"),
                _call("comprehend:DetectEntities", "*"),
                _call("s3:PutObject", f"{bucket}/{work}doc.pdf.part-00000.json"),
            ]
            if env.get("PII_REDACTION") == "true":
                calls.append(_call("comprehend:DetectPiiEntities", "*"))
        elif task == "write_result":
            calls += [
                _call("s3:GetObject", f"{bucket}/{work}doc.pdf.part-00000.json"),
                _call("s3:PutObject", f"{bucket}/{results}doc.pdf.json"),
                _call("s3:DeleteObject", f"{bucket}/{work}doc.pdf.txt"),
                _call("s3:DeleteObject", f"{bucket}/{work}doc.pdf.part-00000.json"),
            ]
        elif task == "record_failure":
            calls += [
                _call("s3:GetObject", f"{bucket}/{inputs}doc.pdf"),
                _call("s3:PutObject", f"{bucket}/{failed}doc.pdf"),
                _call("s3:PutObject", f"{bucket}/{failed}doc.pdf.error.json"),
            ]
        key = finder.bucket_keys.get(env["BUCKET"])
        if key:
            for action in ("kms:Decrypt", "kms:GenerateDataKey"):
                calls.append(_call(action, key, "s3-kms"))
    if kind == "hyperpod-ready":
        calls += _hyperpod_ready_calls(finder, env)
    passes: list[dict[str, str]] = []
    if kind == "scale-to-zero":
        calls, passes = _scale_to_zero_calls(finder, env)
    if calls:
        yield "handler", f"{kind} handler", {"handler_calls": calls, "handler_passes": passes}


def _hyperpod_ready_calls(finder: Finder, env: dict[str, Any]) -> list[dict[str, str]]:
    """runtime/hyperpod_ready/handler.py: DescribeCluster on the HyperPod cluster its environment names."""
    s = finder.stacks
    return [
        _call("sagemaker:DescribeCluster", s.arn(stack, lid), "sm-api")
        for stack, lid, resource in s.all_resources()
        if resource["Type"] == "AWS::SageMaker::Cluster"
        and s.text(stack, resource["Properties"]["ClusterName"]) == env["HYPERPOD_CLUSTER"]
    ]


def _scale_to_zero_calls(finder: Finder, env: dict[str, Any]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The calls of runtime/scale_to_zero/handler.py for the node groups, Batch queues and environments and the
    HyperPod cluster its environment names, and the roles it passes (UpdateCluster repeats each group's role).
    Its Karpenter step (`NODEPOOLS`) makes no IAM-authorized call: the token is a locally presigned
    sts:GetCallerIdentity, which needs no permission (AWS STS API Reference, GetCallerIdentity), and the Kubernetes
    requests are authorized by RBAC (`ScaleToZero`'s ClusterRole, tested against the handler's requests); its network
    interfaces in the VPC are the function's own calls (`VpcConfig`)."""
    s, region, account = finder.stacks, finder.stacks.region, finder.stacks.account
    calls: list[dict[str, str]] = []
    passes: list[dict[str, str]] = []
    nodegroups = set(json.loads(env["NODEGROUPS"]))
    hyperpod = env.get("HYPERPOD_CLUSTER")
    for stack, lid, resource in s.all_resources():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::EKS::Nodegroup" and s.name(stack, lid) in nodegroups:
            for action in ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"):
                calls.append(_call(action, s.arn(stack, lid)))
        if (
            resource["Type"] == "AWS::SageMaker::Cluster"
            and hyperpod
            and s.text(stack, props["ClusterName"]) == hyperpod
        ):
            for action in ("sagemaker:DescribeCluster", "sagemaker:UpdateCluster"):
                calls.append(_call(action, s.arn(stack, lid), "sm-api"))
            roles = {s.text(stack, g["ExecutionRole"]) for g in props["InstanceGroups"]}
            passes += [{"role": r, "service": "sagemaker.amazonaws.com", "source": "sm-api"} for r in sorted(roles)]
    if json.loads(env["JOB_QUEUES"]):
        calls.append(_call("batch:ListJobs", "*"))
        calls.append(_call("batch:TerminateJob", f"arn:aws:batch:{region}:{account}:job/0123abcd-job"))
    for environment in json.loads(env["COMPUTE_ENVIRONMENTS"]):
        calls.append(_call("batch:UpdateComputeEnvironment", environment))
    topic = env.get("NOTIFY_TOPIC_ARN")
    if topic:
        calls.append(_call("sns:Publish", topic))
        key = finder.topic_keys.get(topic)
        if key:
            calls += [_call("kms:GenerateDataKey", key, "sns-kms"), _call("kms:Decrypt", key, "sns-kms")]
    return calls, passes


def sagemaker_jobs_of_handler(finder: Finder, facts: Facts) -> Iterator[tuple[str, str, str, Facts]]:
    """(role, kind, what, facts) for the model and the monitoring job the approval handler creates."""
    kind, env = _function(facts)
    if kind != "approval-deploy":
        return
    region = finder.stacks.region
    endpoint = env["ENDPOINT_NAME"]
    capture, output = env["CAPTURE_URI"], env["MONITOR_OUTPUT_URI"]
    bucket = capture.removeprefix("s3://").split("/", 1)[0]
    runs = f"s3://{bucket}/runs/execution-id"
    key = {"output_keys": [{"key": env["KMS_KEY_ARN"]}]}
    vpc = finder.vpc(json.loads(env["SUBNET_IDS"]), json.loads(env["SECURITY_GROUP_IDS"]))
    images = [finder.image(i) for i in registered_images(finder)]
    yield (
        env["MODEL_ROLE_ARN"],
        "sagemaker-endpoint",
        f"endpoint {endpoint} (created by the approval function)",
        merge(
            finder.s3(f"{runs}/model/pipelines-execution-id-train/output/model.tar.gz", prefix=False, kind="in"),
            finder.s3(f"{capture}/{endpoint}/AllTraffic/2026/01/01/00", prefix=True, kind="out"),
            key,
            vpc,
            finder.logs(f"/aws/sagemaker/Endpoints/{endpoint}", "AllTraffic/i-0123456789abcdef0"),
            *images,
        ),
    )
    schedule_job = f"model-monitoring-202601010000-{endpoint}-data-quality".lower()[:63]
    yield (
        env["MONITOR_ROLE_ARN"],
        "sagemaker-job",
        f"monitoring job of {endpoint}",
        merge(
            finder.s3(f"{capture}/{endpoint}", prefix=True, kind="in"),
            finder.s3(f"{runs}/baseline/constraints.json", prefix=False, kind="in"),
            finder.s3(f"{output}/{endpoint}", prefix=True, kind="out"),
            key,
            vpc,
            finder.image(env["MONITOR_IMAGE"]),
            finder.logs("/aws/sagemaker/ProcessingJobs", f"{schedule_job}/algo-1-1700000000"),
        ),
    )
    # CreateEndpoint with a volume key in the endpoint config: the caller needs kms:CreateGrant.
    if env.get("VOLUME_KMS", "true") == "true":
        own = facts["function"][0]["role"]
        grant = {"volume_keys": [{"key": env["KMS_KEY_ARN"], "role": own}]}
        yield own, "sagemaker-job-caller", f"CreateEndpoint {endpoint} with a volume key ({region})", grant


def registered_images(finder: Finder) -> list[str]:
    """Images that the blueprint's pipelines register (the approval handler deploys them)."""
    images: list[str] = []
    for stack, _lid, resource in finder.stacks.all_resources():
        if resource["Type"] == "AWS::SageMaker::Pipeline":
            body = finder.stacks.text(stack, resource["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"])
            for part in body.split('"Image":"')[1:]:
                images.append(part.split('"', 1)[0])
    return sorted(set(images))
