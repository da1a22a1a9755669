"""Approval-to-deploy: the newest approved model package version serves on one SageMaker endpoint, then is monitored.

The function reconciles; it never trusts an event's payload for what to deploy. On every event it re-reads the
registry and the endpoint and moves the endpoint towards the desired state: the Approved version with the highest
version number of the configured group.
- "SageMaker Model Package State Change" (Approved or Rejected, this group): model and endpoint config named after
  the desired version are created if missing, then the endpoint is created, or updated when it serves another
  version. Rejecting the version that serves rolls the endpoint back to the newest version still Approved; when none
  is left the endpoint keeps serving and the function logs that (it never deletes an endpoint).
- "SageMaker Endpoint State Change" to IN_SERVICE for the configured endpoint: first the same reconcile (an approval
  that arrived while the endpoint was Creating or Updating is applied now), then, when the endpoint serves the desired
  version, the data-quality monitoring schedule is created or moved to the baseline registered with that version.
An endpoint that is Creating or Updating defers the change to its own IN_SERVICE event, so nothing waits on retries.
Two invocations racing are harmless: both compute the same desired version, SageMaker accepts one UpdateEndpoint or
CreateEndpoint and rejects the other as in progress, which defers it the same way. An update that SageMaker rolled
back is not retried in a loop: the endpoint is tagged with the config it is moving to, and a tag that names a config
the endpoint does not serve after IN_SERVICE means that deployment failed; the function logs it and waits for a
newer approval.
Names carry a short hash of the deploy settings in the function's environment (`<endpoint>-v<N>-<hash>` for the
model and endpoint config, `<endpoint>-dq<N>-<hash>` for the data-quality definition), so a `cdk deploy` that changes
the serving or monitoring settings yields new names and the same reconcile moves the endpoint and the schedule to
them. The stack runs the function once per deploy that changes these settings: a CloudFormation custom resource
whose properties are those settings invokes it (`RequestType` events), and it answers on the response URL.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import urllib.request
from typing import Any

import boto3
from botocore.exceptions import ClientError

VARIANT = "AllTraffic"
BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack", "Deleting", "UpdateRollbackFailed")
TARGET_TAG = "mlstack:deploying"
"""Endpoint tag: the endpoint config the last CreateEndpoint/UpdateEndpoint of this function moved to."""
_SHARED_SETTINGS = ("KMS_KEY_ARN", "SUBNET_IDS", "SECURITY_GROUP_IDS")
SERVING_SETTINGS = (
    *_SHARED_SETTINGS,
    "INSTANCE_TYPE",
    "INSTANCE_COUNT",
    "CAPTURE_PERCENT",
    "CAPTURE_URI",
    "VOLUME_KMS",
)
"""Environment variables that shape the model and endpoint config (a change: a new config name)."""
MONITOR_SETTINGS = (*_SHARED_SETTINGS, "MONITOR_IMAGE", "MONITOR_INSTANCE_TYPE", "MONITOR_VOLUME_KMS")
"""Environment variables that shape the data-quality job definition (a change: a new definition name)."""
HASH_CHARS = 6
"""Six hex digits: a 40-character blueprint name (`<name>-serving`, 48) leaves `-dq<N>-<hash>` room for 99999
versions within SageMaker's 63-character names; a collision (about one in 16 million per pair of settings) would only
keep the old settings."""
_SERVING_CONFIG = re.compile(r"-v(\d+)(?:-[0-9a-f]+)?$")
_client: Any = None
log = logging.getLogger("approval_deploy")
log.setLevel(logging.INFO)


def sagemaker() -> Any:
    global _client
    if _client is None:
        _client = boto3.client("sagemaker")
    return _client


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise RuntimeError(f"environment variable {name} is not set")
    return value


def settings_hash(names: tuple[str, ...]) -> str:
    """A short stable digest of the named environment variables (missing ones count as empty)."""
    values = json.dumps({name: os.environ.get(name, "") for name in names}, sort_keys=True)
    return hashlib.sha256(values.encode()).hexdigest()[:HASH_CHARS]


def handler(event: dict[str, Any], _context: Any = None) -> dict[str, Any]:
    if "RequestType" in event and "ResponseURL" in event:
        return stack_deployed(event)
    detail_type = event.get("detail-type")
    detail = event.get("detail") or {}
    if detail_type == "SageMaker Model Package State Change":
        if detail.get("ModelPackageGroupName") != env("MODEL_PACKAGE_GROUP"):
            return _report({"action": "ignored", "reason": "another model package group"})
        return _report(reconcile())
    if detail_type == "SageMaker Endpoint State Change":
        # Endpoint events spell the status IN_SERVICE (AWS docs: "Events that Amazon SageMaker AI sends to
        # EventBridge").
        if detail.get("EndpointName") != env("ENDPOINT_NAME") or detail.get("EndpointStatus") not in (
            "IN_SERVICE",
            "InService",
        ):
            return _report({"action": "ignored", "reason": "not this endpoint going InService"})
        result = _report(reconcile())
        if result["action"] in ("none", "failed-deployment", "no-approved-version"):
            # The endpoint keeps what it serves: monitor that version.
            return _report(monitor())
        return result
    return _report({"action": "ignored", "reason": f"unexpected event {detail_type!r}"})


def stack_deployed(event: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation created or updated the settings: apply them now. Always answers SUCCESS, so a SageMaker
    problem never rolls the stack back; a reconcile that raises is logged as "failed-deployment" (the alarm's
    metric filter) instead. Delete does nothing: the endpoint outlives the stack (see the README teardown).
    CloudFormation invokes the function asynchronously with a callback URL (AWS Lambda Developer Guide, "Using AWS
    Lambda with CloudFormation"); the stack waits for that answer (ServiceTimeout 300 s)."""
    try:
        if event["RequestType"] == "Delete":
            result = _report({"action": "ignored", "reason": "stack delete: the endpoint is left as it is"})
        else:
            result = _report(reconcile())
            if result["action"] in ("none", "failed-deployment", "no-approved-version"):
                result = _report(monitor())
    except Exception as err:  # CloudFormation must get an answer, whatever failed
        result = _report({"action": "failed-deployment", "reason": f"reconcile after the stack deploy: {err!r}"})
    _respond(event, result)
    return result


def _respond(event: dict[str, Any], result: dict[str, Any]) -> None:
    """PUT the answer to the pre-signed response URL (CloudFormation User Guide, "Custom resource response
    objects"): an empty Content-Type, since the URL was signed without one."""
    body = {
        "Status": "SUCCESS",
        "Reason": str(result.get("reason", result["action"]))[:1000],
        "PhysicalResourceId": event.get("PhysicalResourceId") or f"{env('ENDPOINT_NAME')}-reconcile",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": {"Action": result["action"]},
    }
    request = urllib.request.Request(
        event["ResponseURL"], data=json.dumps(body).encode(), method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # CloudFormation's https URL
        response.read()


def _report(result: dict[str, Any]) -> dict[str, Any]:
    """One JSON log line per decision: what the function did and why (CloudWatch Logs Insights can filter on it)."""
    level = logging.ERROR if result["action"] == "failed-deployment" else logging.INFO
    if result["action"] == "no-approved-version":
        level = logging.WARNING
    log.log(level, json.dumps(result, sort_keys=True))
    return result


def reconcile() -> dict[str, Any]:
    """Move the endpoint towards the newest Approved version (see the module docstring)."""
    endpoint = env("ENDPOINT_NAME")
    current = _endpoint(endpoint)
    if current is not None and current["EndpointStatus"] in BUSY:
        return {
            "action": "deferred",
            "reason": f"endpoint {endpoint} is {current['EndpointStatus']}; its IN_SERVICE event applies the newest "
            "approved version",
        }
    if current is not None and current["EndpointStatus"] == "Failed":
        return {
            "action": "failed-deployment",
            "reason": f"endpoint {endpoint} is Failed ({current.get('FailureReason', 'no reason given')}); delete "
            "it and approve again to recreate it",
        }
    package = _newest_approved()
    if package is None:
        if current is None:
            return {"action": "ignored", "reason": "no Approved version in the group"}
        return {
            "action": "no-approved-version",
            "reason": f"no Approved version is left; {endpoint} keeps serving {current['EndpointConfigName']} "
            "(delete the endpoint to stop it)",
        }
    name = f"{endpoint}-v{package['ModelPackageVersion']}-{settings_hash(SERVING_SETTINGS)}"
    if current is not None:
        serving = current["EndpointConfigName"]
        if serving == name:
            return {"action": "none", "reason": f"{name} is already serving"}
        if _target(current) == name:
            return {
                "action": "failed-deployment",
                "reason": f"the update of {endpoint} to {name} did not complete ({current.get('FailureReason', '')}); "
                f"{serving} still serves; approve a newer version to deploy again",
            }
    _ensure_model(name, package)
    _ensure_endpoint_config(name)
    try:
        if current is None:
            sagemaker().create_endpoint(
                EndpointName=endpoint,
                EndpointConfigName=name,
                Tags=[*_tags(package), {"Key": TARGET_TAG, "Value": name}],
            )
            return {"action": "created", "endpoint": endpoint, "config": name}
        sagemaker().add_tags(ResourceArn=current["EndpointArn"], Tags=[{"Key": TARGET_TAG, "Value": name}])
        sagemaker().update_endpoint(EndpointName=endpoint, EndpointConfigName=name)
    except ClientError as err:
        if _in_progress(err):
            return {"action": "deferred", "reason": f"another change of {endpoint} is in progress: {_message(err)}"}
        raise
    return {"action": "updated", "endpoint": endpoint, "config": name, "previous": current["EndpointConfigName"]}


def _newest_approved() -> dict[str, Any] | None:
    """DescribeModelPackage of the Approved version with the highest version number, or None."""
    newest: dict[str, Any] | None = None
    kwargs: dict[str, Any] = {"ModelPackageGroupName": env("MODEL_PACKAGE_GROUP"), "ModelApprovalStatus": "Approved"}
    while True:
        page = sagemaker().list_model_packages(**kwargs)
        for summary in page.get("ModelPackageSummaryList", []):
            if newest is None or summary["ModelPackageVersion"] > newest["ModelPackageVersion"]:
                newest = summary
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    if newest is None:
        return None
    package: dict[str, Any] = sagemaker().describe_model_package(ModelPackageName=newest["ModelPackageArn"])
    # Re-read: the version may have been rejected between the list and now.
    return package if package["ModelApprovalStatus"] == "Approved" else None


def _target(endpoint: dict[str, Any]) -> str | None:
    tags = sagemaker().list_tags(ResourceArn=endpoint["EndpointArn"]).get("Tags", [])
    values = [t["Value"] for t in tags if t["Key"] == TARGET_TAG]
    return values[-1] if values else None


def _in_progress(err: ClientError) -> bool:
    """SageMaker's answer to a second change of an endpoint that is already changing (or already created)."""
    message = _message(err).lower()
    return err.response.get("Error", {}).get("Code") == "ValidationException" and (
        "in-progress" in message or "in progress" in message or "already existing endpoint" in message
    )


def _message(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Message", ""))


def monitor() -> dict[str, Any]:
    """Point the data-quality schedule at the baseline registered with the version the endpoint serves."""
    endpoint = env("ENDPOINT_NAME")
    current = _endpoint(endpoint)
    if current is None:
        return {"action": "ignored", "reason": f"endpoint {endpoint} does not exist"}
    config = current["EndpointConfigName"]
    match = _SERVING_CONFIG.search(config)
    if match is None:
        return {"action": "ignored", "reason": f"{endpoint} serves {config}, which this function did not create"}
    version = match.group(1)
    package = sagemaker().describe_model_package(ModelPackageName=f"{_package_prefix()}/{version}")
    baseline = package.get("DriftCheckBaselines", {}).get("ModelDataQuality", {})
    if "Constraints" not in baseline or "Statistics" not in baseline:
        return {"action": "none", "reason": f"version {version} has no data-quality baseline"}
    definition = f"{endpoint}-dq{version}-{settings_hash(MONITOR_SETTINGS)}"
    if not _exists(sagemaker().describe_data_quality_job_definition, JobDefinitionName=definition):
        sagemaker().create_data_quality_job_definition(**_job_definition(definition, endpoint, baseline))
    schedule = f"{endpoint}-data-quality"
    expression = env("MONITOR_SCHEDULE", "cron(0 * ? * * *)")
    config_body = {
        "ScheduleConfig": {"ScheduleExpression": expression},
        "MonitoringJobDefinitionName": definition,
        "MonitoringType": "DataQuality",
    }
    existing = _describe(sagemaker().describe_monitoring_schedule, MonitoringScheduleName=schedule)
    if existing is None:
        sagemaker().create_monitoring_schedule(MonitoringScheduleName=schedule, MonitoringScheduleConfig=config_body)
        return {"action": "schedule-created", "schedule": schedule, "definition": definition}
    current_config = existing["MonitoringScheduleConfig"]
    current_expression = current_config.get("ScheduleConfig", {}).get("ScheduleExpression")
    if current_config.get("MonitoringJobDefinitionName") == definition and current_expression == expression:
        return {"action": "none", "reason": f"{schedule} already checks against {definition}"}
    sagemaker().update_monitoring_schedule(MonitoringScheduleName=schedule, MonitoringScheduleConfig=config_body)
    return {"action": "schedule-updated", "schedule": schedule, "definition": definition}


def _package_prefix() -> str:
    """`arn:<partition>:sagemaker:<region>:<account>:model-package/<group>` from the configured group ARN."""
    return env("MODEL_PACKAGE_GROUP_ARN").replace(":model-package-group/", ":model-package/", 1)


def _endpoint(name: str) -> dict[str, Any] | None:
    return _describe(sagemaker().describe_endpoint, EndpointName=name)


def _describe(call: Any, **kwargs: Any) -> dict[str, Any] | None:
    try:
        result: dict[str, Any] = call(**kwargs)
    except ClientError as err:
        message = err.response.get("Error", {}).get("Message", "")
        if err.response.get("Error", {}).get("Code") in ("ValidationException", "ResourceNotFound") and (
            "not find" in message.lower() or "not found" in message.lower() or "does not exist" in message.lower()
        ):
            return None
        raise
    return result


def _exists(call: Any, **kwargs: Any) -> bool:
    return _describe(call, **kwargs) is not None


def _tags(package: dict[str, Any]) -> list[dict[str, str]]:
    return [{"Key": "mlstack:model-package", "Value": package["ModelPackageArn"]}]


def _vpc() -> dict[str, list[str]]:
    return {
        "Subnets": json.loads(env("SUBNET_IDS")),
        "SecurityGroupIds": json.loads(env("SECURITY_GROUP_IDS")),
    }


def _create_once(call: Any, **kwargs: Any) -> None:
    """Create a model or endpoint config; one that a racing invocation created a moment ago is as good."""
    try:
        call(**kwargs)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ValidationException" or "already exist" not in _message(err):
            raise


def _ensure_model(name: str, package: dict[str, Any]) -> None:
    if _exists(sagemaker().describe_model, ModelName=name):
        return
    container = package["InferenceSpecification"]["Containers"][0]
    primary = {"Image": container["Image"], "ModelDataUrl": container["ModelDataUrl"]}
    if container.get("Environment"):
        primary["Environment"] = container["Environment"]
    _create_once(
        sagemaker().create_model,
        ModelName=name,
        ExecutionRoleArn=env("MODEL_ROLE_ARN"),
        PrimaryContainer=primary,
        VpcConfig=_vpc(),
        EnableNetworkIsolation=True,
        Tags=_tags(package),
    )


def _ensure_endpoint_config(name: str) -> None:
    if _exists(sagemaker().describe_endpoint_config, EndpointConfigName=name):
        return
    _create_once(
        sagemaker().create_endpoint_config,
        EndpointConfigName=name,
        ProductionVariants=[
            {
                "VariantName": VARIANT,
                "ModelName": name,
                "InstanceType": env("INSTANCE_TYPE"),
                "InitialInstanceCount": int(env("INSTANCE_COUNT", "1")),
            }
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": int(env("CAPTURE_PERCENT", "100")),
            "DestinationS3Uri": env("CAPTURE_URI"),
            "KmsKeyId": env("KMS_KEY_ARN"),
            "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
            "CaptureContentTypeHeader": {"CsvContentTypes": ["text/csv"]},
        },
        # No volume key on hosts with local NVMe: SageMaker rejects KmsKeyId there (the NVMe is encrypted).
        **({"KmsKeyId": env("KMS_KEY_ARN")} if env("VOLUME_KMS", "true") == "true" else {}),
    )


def _job_definition(name: str, endpoint: str, baseline: dict[str, Any]) -> dict[str, Any]:
    return {
        "JobDefinitionName": name,
        "DataQualityBaselineConfig": {
            "ConstraintsResource": {"S3Uri": baseline["Constraints"]["S3Uri"]},
            "StatisticsResource": {"S3Uri": baseline["Statistics"]["S3Uri"]},
        },
        "DataQualityAppSpecification": {"ImageUri": env("MONITOR_IMAGE")},
        "DataQualityJobInput": {
            "EndpointInput": {"EndpointName": endpoint, "LocalPath": "/opt/ml/processing/input/endpoint"}
        },
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [
                {
                    "S3Output": {
                        "S3Uri": env("MONITOR_OUTPUT_URI"),
                        "LocalPath": "/opt/ml/processing/output",
                        "S3UploadMode": "EndOfJob",
                    }
                }
            ],
            "KmsKeyId": env("KMS_KEY_ARN"),
        },
        "JobResources": {
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": env("MONITOR_INSTANCE_TYPE"),
                "VolumeSizeInGB": 20,
                # No volume key on monitoring instances with local NVMe (SageMaker rejects it there).
                **({"VolumeKmsKeyId": env("KMS_KEY_ARN")} if env("MONITOR_VOLUME_KMS", "true") == "true" else {}),
            }
        },
        "NetworkConfig": {"VpcConfig": _vpc(), "EnableNetworkIsolation": True},
        "RoleArn": env("MONITOR_ROLE_ARN"),
        "StoppingCondition": {"MaxRuntimeInSeconds": 1800},
    }
