"""Approval-to-deploy: an approved model package version goes live on one SageMaker endpoint; then it is monitored.

Two EventBridge events reach this function:
- "SageMaker Model Package State Change" of the configured group. Only a version whose *current* status (read back
  with DescribeModelPackage, not trusted from the event) is Approved is deployed: model and endpoint config named
  after the version are created if missing, then the endpoint is created, or updated when it serves another
  version. A rejected or pending version changes nothing. A failed update leaves the old fleet serving (SageMaker
  rolls an endpoint update back when the new variant does not become healthy). The same event twice is a no-op.
- "SageMaker Endpoint State Change" to InService for the configured endpoint: the data-quality monitoring schedule
  is created, or moved to the baseline of the version now serving (the baseline the pipeline registered with the
  version under DriftCheckBaselines). A schedule cannot be created before the endpoint exists, which is why this
  runs on InService and not at deploy time.
An endpoint that is Creating or Updating makes the function fail, so Lambda retries the event later.
"""

from __future__ import annotations

import json
import os
from typing import Any

import boto3
from botocore.exceptions import ClientError

VARIANT = "AllTraffic"
_client: Any = None


class EndpointBusyError(RuntimeError):
    """The endpoint is changing; raising makes Lambda retry the asynchronous event."""


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


def handler(event: dict[str, Any], _context: Any = None) -> dict[str, Any]:
    detail_type = event.get("detail-type")
    detail = event.get("detail") or {}
    if detail_type == "SageMaker Model Package State Change":
        return deploy(detail)
    if detail_type == "SageMaker Endpoint State Change":
        return monitor(detail)
    return {"action": "ignored", "reason": f"unexpected event {detail_type!r}"}


def deploy(detail: dict[str, Any]) -> dict[str, Any]:
    endpoint = env("ENDPOINT_NAME")
    if detail.get("ModelPackageGroupName") != env("MODEL_PACKAGE_GROUP"):
        return {"action": "ignored", "reason": "another model package group"}
    package = sagemaker().describe_model_package(ModelPackageName=detail["ModelPackageArn"])
    status = package["ModelApprovalStatus"]
    if status != "Approved":
        return {"action": "ignored", "reason": f"version status is {status}; only Approved versions deploy"}
    name = f"{endpoint}-v{package['ModelPackageVersion']}"
    current = _endpoint(endpoint)
    if current is not None:
        if current["EndpointStatus"] in ("Creating", "Updating", "SystemUpdating", "RollingBack", "Deleting"):
            raise EndpointBusyError(f"endpoint {endpoint} is {current['EndpointStatus']}; retry later")
        if current["EndpointConfigName"] == name and current["EndpointStatus"] == "InService":
            return {"action": "none", "reason": f"{name} is already serving"}
    _ensure_model(name, package)
    _ensure_endpoint_config(name)
    if current is None:
        sagemaker().create_endpoint(EndpointName=endpoint, EndpointConfigName=name, Tags=_tags(package))
        return {"action": "created", "endpoint": endpoint, "config": name}
    sagemaker().update_endpoint(EndpointName=endpoint, EndpointConfigName=name)
    return {"action": "updated", "endpoint": endpoint, "config": name, "previous": current["EndpointConfigName"]}


def monitor(detail: dict[str, Any]) -> dict[str, Any]:
    endpoint = env("ENDPOINT_NAME")
    # Endpoint events spell the status IN_SERVICE (AWS docs: "Events that Amazon SageMaker AI sends to EventBridge").
    if detail.get("EndpointName") != endpoint or detail.get("EndpointStatus") not in ("IN_SERVICE", "InService"):
        return {"action": "ignored", "reason": "not this endpoint going InService"}
    current = _endpoint(endpoint)
    if current is None:
        return {"action": "ignored", "reason": f"endpoint {endpoint} does not exist"}
    config = current["EndpointConfigName"]
    version = config.rsplit("-v", 1)[-1]
    package = sagemaker().describe_model_package(ModelPackageName=f"{_package_prefix()}/{version}")
    baseline = package.get("DriftCheckBaselines", {}).get("ModelDataQuality", {})
    if "Constraints" not in baseline or "Statistics" not in baseline:
        return {"action": "none", "reason": f"version {version} has no data-quality baseline"}
    definition = f"{endpoint}-dq-v{version}"
    if not _exists(sagemaker().describe_data_quality_job_definition, JobDefinitionName=definition):
        sagemaker().create_data_quality_job_definition(**_job_definition(definition, endpoint, baseline))
    schedule = f"{endpoint}-data-quality"
    config_body = {
        "ScheduleConfig": {"ScheduleExpression": env("MONITOR_SCHEDULE", "cron(0 * ? * * *)")},
        "MonitoringJobDefinitionName": definition,
        "MonitoringType": "DataQuality",
    }
    existing = _describe(sagemaker().describe_monitoring_schedule, MonitoringScheduleName=schedule)
    if existing is None:
        sagemaker().create_monitoring_schedule(MonitoringScheduleName=schedule, MonitoringScheduleConfig=config_body)
        return {"action": "schedule-created", "schedule": schedule, "definition": definition}
    if existing["MonitoringScheduleConfig"].get("MonitoringJobDefinitionName") == definition:
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


def _ensure_model(name: str, package: dict[str, Any]) -> None:
    if _exists(sagemaker().describe_model, ModelName=name):
        return
    container = package["InferenceSpecification"]["Containers"][0]
    primary = {"Image": container["Image"], "ModelDataUrl": container["ModelDataUrl"]}
    if container.get("Environment"):
        primary["Environment"] = container["Environment"]
    sagemaker().create_model(
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
    sagemaker().create_endpoint_config(
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
                "VolumeKmsKeyId": env("KMS_KEY_ARN"),
            }
        },
        "NetworkConfig": {"VpcConfig": _vpc(), "EnableNetworkIsolation": True},
        "RoleArn": env("MONITOR_ROLE_ARN"),
        "StoppingCondition": {"MaxRuntimeInSeconds": 1800},
    }
