"""`mlstack precheck <blueprint>`: before `cdk deploy InferenceStack`, is everything the endpoints read in place?

SageMaker's CreateModel fails (and rolls the stack back) when the model artifact or the image is missing, so this
check reads, with boto3 and read-only calls only, what the endpoint stack will need:

- the DataStack is deployed (its outputs name the model bucket);
- the model bucket is in the blueprint's region and holds the artifact object;
- a same-account ECR image tag exists (an AWS Deep Learning Container lives in AWS's registry: not checked);
- the account's SageMaker endpoint-instance quotas cover each variant's maximum, where Service Quotas answers;
- with a `budget:`, its cost-allocation tag is active (`mlstack.precheck_cost`).

It prints one line per missing thing and exits 1; synth never calls it (synth stays offline).
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mlstack.config import BlueprintConfig
from mlstack.config.inference import (
    AsyncEndpointConfig,
    EcrImage,
    InferenceConfig,
    RealtimeEndpointConfig,
)
from mlstack.errors import InputError
from mlstack.precheck_cost import check_cost_allocation_tag

MODEL_BUCKET_OUTPUT = "ModelBucketName"
"""The DataStack output that names the model bucket (mlstack.stacks.data sets it; no CDK import here)."""


@dataclass
class Precheck:
    problems: list[str] = field(default_factory=list)
    """One line per missing thing."""
    notes: list[str] = field(default_factory=list)
    """What could not be checked, and why."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "precheck",
        help="before deploying an InferenceStack: artifact, image and quotas in place (read-only AWS calls)",
    )
    p.add_argument("blueprint", help="name or path of an inference blueprint")
    p.add_argument("--profile", default=None, help="AWS CLI profile (default: the usual credential chain)")
    p.set_defaults(handler=cmd_precheck)


def cmd_precheck(args: argparse.Namespace) -> int:
    from mlstack import config as blueprint_config

    loaded = blueprint_config.load(args.blueprint)
    try:
        import boto3
    except ImportError:
        raise InputError("precheck needs boto3: pip install 'mlstack[precheck]'") from None
    result = run_precheck(loaded, boto3.Session(profile_name=args.profile, region_name=loaded.env.region))
    for note in result.notes:
        print(f"note: {note}")
    for problem in result.problems:
        print(f"missing: {problem}")
    if result.problems:
        return 1
    if loaded.inference is None:
        print(f"ok: {loaded.name}: nothing missing for its budget")
        return 0
    print(f"ok: {loaded.name}: the InferenceStack can be deployed (npx cdk deploy InferenceStack -c blueprint=...)")
    return 0


def run_precheck(config: BlueprintConfig, session: Any) -> Precheck:
    """Read-only checks in the blueprint's region with `session` (a boto3.Session)."""
    result = Precheck()
    check_cost_allocation_tag(config, session, result.problems, result.notes)
    inference = config.inference
    if inference is None and config.inference_eks is not None:
        raise InputError(
            f"blueprint {config.name!r} serves on EKS: nothing must exist before its deploy (upload the weights to "
            "the stack output WeightsUri afterwards, as the README's first use says)"
        )
    if inference is None:
        if config.budget is None:
            raise InputError(f"blueprint {config.name!r} has no inference section nor budget: nothing to check")
        return result
    region = config.env.region
    bucket = _model_bucket(config, session, result)
    if bucket is not None:
        artifact = inference.model.artifact
        _check_artifact(bucket, artifact.key, region, session, result, prefix=artifact.uncompressed)
    image = inference.model.image
    if isinstance(image, EcrImage):
        _check_image(image, region, session, result)
    else:
        result.notes.append(
            f"image {image.repository}:{image.tag} is in registry account {image.registry_account(region)}, "
            "not checked "
            "(this account cannot list it); make sure the tag exists in the AWS DLC list"
        )
    _check_quotas(inference, region, session, result)
    return result


def _error_code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(err).__name__))


def _model_bucket(config: BlueprintConfig, session: Any, result: Precheck) -> str | None:
    assert config.inference is not None
    existing = config.inference.model.artifact.existing_bucket
    if existing is not None:
        return existing
    stack = f"{config.name}-DataStack"
    cfn = session.client("cloudformation", region_name=config.env.region)
    try:
        (described,) = cfn.describe_stacks(StackName=stack)["Stacks"]
    except Exception as err:  # botocore ClientError: the stack does not exist (or cannot be read)
        result.problems.append(
            f"stack {stack} is not deployed in {config.env.region} ({_error_code(err)}): "
            f"run npx cdk deploy DataStack -c blueprint={config.name} first"
        )
        return None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    if MODEL_BUCKET_OUTPUT not in outputs:
        result.problems.append(
            f"stack {stack} has no {MODEL_BUCKET_OUTPUT} output (status {described.get('StackStatus')}): "
            f"deploy DataStack again with this version of mlstack"
        )
        return None
    return str(outputs[MODEL_BUCKET_OUTPUT])


def _check_artifact(
    bucket: str, key: str, region: str, session: Any, result: Precheck, *, prefix: bool = False
) -> None:
    s3 = session.client("s3", region_name=region)
    try:
        where = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    except Exception as err:
        result.problems.append(f"model bucket {bucket} cannot be read ({_error_code(err)}): check its name and access")
        return
    if where != region:
        result.problems.append(
            f"model bucket {bucket} is in {where}, but the endpoints deploy in {region}: SageMaker reads the "
            f"artifact from the endpoint's region; copy it to a bucket in {region}"
        )
        return
    if prefix:
        # An uncompressed artifact: model files under the prefix, copied as they are.
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        if not listed.get("KeyCount"):
            result.problems.append(
                f"model files under s3://{bucket}/{key} do not exist: upload them (aws s3 cp --recursive <dir> "
                f"s3://{bucket}/{key})"
            )
        return
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except Exception as err:
        code = _error_code(err)
        if code in ("404", "NoSuchKey", "NotFound"):
            result.problems.append(
                f"model artifact s3://{bucket}/{key} does not exist: upload it (aws s3 cp model.tar.gz s3://{bucket}/{key})"
            )
        else:
            result.problems.append(f"model artifact s3://{bucket}/{key} cannot be read ({code})")


def _check_image(image: EcrImage, region: str, session: Any, result: Precheck) -> None:
    ecr = session.client("ecr", region_name=region)
    try:
        ecr.describe_images(repositoryName=image.repository, imageIds=[{"imageTag": image.tag}])
    except Exception as err:
        code = _error_code(err)
        if code == "RepositoryNotFoundException":
            result.problems.append(
                f"ECR repository {image.repository} does not exist in {region}: deploy DataStack "
                "(create_repository: true) or create it"
            )
        elif code == "ImageNotFoundException":
            result.problems.append(
                f"image {image.repository}:{image.tag} is not in ECR in {region}: docker push it first"
            )
        else:
            result.problems.append(f"image {image.repository}:{image.tag} cannot be read in {region} ({code})")


def instances_needed(inference: InferenceConfig) -> Counter[str]:
    """Most instances of each hosting type the endpoints can run at once (autoscaling max or the fixed count)."""
    needed: Counter[str] = Counter()
    for endpoint in inference.endpoints:
        if isinstance(endpoint, RealtimeEndpointConfig):
            for v in endpoint.variants:
                needed[v.instance_type] += max(v.instance_count, v.autoscaling.max_instances if v.autoscaling else 0)
        elif isinstance(endpoint, AsyncEndpointConfig):
            top = endpoint.autoscaling.max_instances if endpoint.autoscaling else 0
            needed[endpoint.instance_type] += max(endpoint.instance_count, top)
    return needed


def _check_quotas(inference: InferenceConfig, region: str, session: Any, result: Precheck) -> None:
    needed = instances_needed(inference)
    if not needed:
        return
    quotas: dict[str, float] = {}
    try:
        client = session.client("service-quotas", region_name=region)
        for page in client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
            for quota in page.get("Quotas", []):
                quotas[str(quota.get("QuotaName", ""))] = float(quota.get("Value", 0))
    except Exception as err:
        result.notes.append(f"SageMaker quotas not readable ({_error_code(err)}); check them in Service Quotas")
        return
    for instance_type, count in sorted(needed.items()):
        # Service Quotas names the per-type hosting quota "<type> for endpoint usage".
        value = quotas.get(f"{instance_type} for endpoint usage")
        if value is None:
            result.notes.append(f"no quota '{instance_type} for endpoint usage' listed in {region}; not checked")
        elif value < count:
            result.problems.append(
                f"quota '{instance_type} for endpoint usage' is {value:g} in {region}, the endpoints may run "
                f"{count}: request an increase in Service Quotas"
            )
