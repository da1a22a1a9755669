"""runtime/approval_deploy/handler.py against moto's SageMaker (registry, models, configs, endpoints, job definitions).

moto 5.2.5 has no UpdateEndpoint and no monitoring schedules: those two calls go to a recorder that wraps the moto
client, so the test still sees exactly what the handler asked SageMaker to do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from runtime.approval_deploy import handler

REGION = "us-east-1"
ACCOUNT = "123456789012"
GROUP = "churn-models"
ENDPOINT = "churn-serving"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"


class Recorder:
    """The moto client, plus UpdateEndpoint and the monitoring-schedule calls moto does not implement."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.schedules: dict[str, dict[str, Any]] = {}
        self.status_override: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def describe_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.real.describe_endpoint(**kwargs)
        if self.status_override:
            result["EndpointStatus"] = self.status_override
        return result

    def update_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("update_endpoint", kwargs))
        return {}

    def describe_monitoring_schedule(self, MonitoringScheduleName: str) -> dict[str, Any]:  # noqa: N803
        if MonitoringScheduleName not in self.schedules:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFound", "Message": f"Could not find {MonitoringScheduleName}"}},
                "DescribeMonitoringSchedule",
            )
        return {"MonitoringScheduleConfig": self.schedules[MonitoringScheduleName]}

    def create_monitoring_schedule(self, MonitoringScheduleName: str, MonitoringScheduleConfig: dict[str, Any]) -> None:  # noqa: N803
        self.calls.append(("create_monitoring_schedule", {"name": MonitoringScheduleName}))
        self.schedules[MonitoringScheduleName] = MonitoringScheduleConfig

    def update_monitoring_schedule(self, MonitoringScheduleName: str, MonitoringScheduleConfig: dict[str, Any]) -> None:  # noqa: N803
        self.calls.append(("update_monitoring_schedule", {"name": MonitoringScheduleName}))
        self.schedules[MonitoringScheduleName] = MonitoringScheduleConfig


@pytest.fixture
def sm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    for key, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "ENDPOINT_NAME": ENDPOINT,
        "MODEL_PACKAGE_GROUP": GROUP,
        "MODEL_PACKAGE_GROUP_ARN": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/{GROUP}",
        "MODEL_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/model",
        "MONITOR_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/monitor",
        # moto accepts only older ml.* types in CreateEndpointConfig.
        "INSTANCE_TYPE": "ml.m5.large",
        "CAPTURE_URI": "s3://artifacts/capture",
        "MONITOR_OUTPUT_URI": "s3://artifacts/monitoring",
        "MONITOR_IMAGE": "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer:latest",
        "MONITOR_INSTANCE_TYPE": "ml.m5.large",
        "KMS_KEY_ARN": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234",
        "SUBNET_IDS": json.dumps(["subnet-1"]),
        "SECURITY_GROUP_IDS": json.dumps(["sg-1"]),
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        client = boto3.client("sagemaker", region_name=REGION)
        client.create_model_package_group(ModelPackageGroupName=GROUP)
        recorder = Recorder(client)
        monkeypatch.setattr(handler, "_client", recorder)
        yield recorder


def _register(sm: Recorder, status: str = "PendingManualApproval", baseline: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ModelPackageGroupName": GROUP,
        "ModelApprovalStatus": status,
        "InferenceSpecification": {
            "Containers": [{"Image": IMAGE, "ModelDataUrl": "s3://artifacts/runs/x/model/model.tar.gz"}],
            "SupportedContentTypes": ["text/csv"],
            "SupportedResponseMIMETypes": ["text/csv"],
        },
    }
    if baseline:
        body["DriftCheckBaselines"] = {
            "ModelDataQuality": {
                "Constraints": {"ContentType": "application/json", "S3Uri": "s3://artifacts/runs/x/constraints.json"},
                "Statistics": {"ContentType": "application/json", "S3Uri": "s3://artifacts/runs/x/statistics.json"},
            }
        }
    arn = sm.real.create_model_package(**body)["ModelPackageArn"]
    return dict(sm.real.describe_model_package(ModelPackageName=arn))


def _approve(sm: Recorder, package: dict[str, Any], status: str = "Approved") -> dict[str, Any]:
    sm.real.update_model_package(ModelPackageArn=package["ModelPackageArn"], ModelApprovalStatus=status)
    return _event(package, status)


def _event(package: dict[str, Any], status: str, group: str = GROUP) -> dict[str, Any]:
    return {
        "source": "aws.sagemaker",
        "detail-type": "SageMaker Model Package State Change",
        "detail": {
            "ModelPackageGroupName": group,
            "ModelPackageArn": package["ModelPackageArn"],
            "ModelPackageVersion": package["ModelPackageVersion"],
            "ModelApprovalStatus": status,
        },
    }


def _in_service() -> dict[str, Any]:
    return {
        "source": "aws.sagemaker",
        "detail-type": "SageMaker Endpoint State Change",
        "detail": {"EndpointName": ENDPOINT, "EndpointStatus": "IN_SERVICE"},
    }


def test_approved_version_creates_the_endpoint_with_data_capture(sm: Recorder) -> None:
    package = _register(sm)
    result = handler.handler(_approve(sm, package))
    name = f"{ENDPOINT}-v{package['ModelPackageVersion']}"
    assert result == {"action": "created", "endpoint": ENDPOINT, "config": name}
    assert sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == name
    model = sm.real.describe_model(ModelName=name)
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://artifacts/runs/x/model/model.tar.gz"
    assert model["ExecutionRoleArn"].endswith(":role/model")
    config = sm.real.describe_endpoint_config(EndpointConfigName=name)
    assert config["ProductionVariants"][0]["ModelName"] == name
    capture = config["DataCaptureConfig"]
    assert capture["EnableCapture"] is True
    assert capture["DestinationS3Uri"] == "s3://artifacts/capture"
    assert capture["InitialSamplingPercentage"] == 100


def test_same_approval_twice_changes_nothing(sm: Recorder) -> None:
    package = _register(sm)
    event = _approve(sm, package)
    handler.handler(event)
    assert handler.handler(event)["action"] == "none"
    assert sm.calls == []
    assert len(sm.real.list_endpoint_configs()["EndpointConfigs"]) == 1


@pytest.mark.parametrize("status", ["Rejected", "PendingManualApproval"])
def test_rejected_or_pending_version_changes_nothing(sm: Recorder, status: str) -> None:
    serving = _register(sm)
    handler.handler(_approve(sm, serving))
    before = sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    candidate = _register(sm)
    result = handler.handler(_approve(sm, candidate, status) if status == "Rejected" else _event(candidate, status))
    assert result["action"] == "ignored"
    assert sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == before
    assert sm.calls == []
    assert len(sm.real.list_models()["Models"]) == 1


def test_stale_approval_event_of_a_version_rejected_since_is_ignored(sm: Recorder) -> None:
    package = _register(sm)
    event = _approve(sm, package)
    sm.real.update_model_package(ModelPackageArn=package["ModelPackageArn"], ModelApprovalStatus="Rejected")
    assert handler.handler(event) == {
        "action": "ignored",
        "reason": "version status is Rejected; only Approved versions deploy",
    }
    assert sm.real.list_endpoints()["Endpoints"] == []


def test_newly_approved_version_updates_the_serving_endpoint(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    second = _register(sm)
    result = handler.handler(_approve(sm, second))
    name = f"{ENDPOINT}-v{second['ModelPackageVersion']}"
    assert result == {"action": "updated", "endpoint": ENDPOINT, "config": name, "previous": f"{ENDPOINT}-v1"}
    assert sm.calls == [("update_endpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": name})]
    assert sm.real.describe_endpoint_config(EndpointConfigName=name)["ProductionVariants"][0]["ModelName"] == name


def test_endpoint_busy_raises_so_lambda_retries_and_nothing_is_created(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    sm.status_override = "Updating"
    with pytest.raises(handler.EndpointBusyError, match="is Updating; retry later"):
        handler.handler(_approve(sm, _register(sm)))
    assert len(sm.real.list_models()["Models"]) == 1
    assert sm.calls == []


def test_other_group_is_ignored(sm: Recorder) -> None:
    package = _register(sm)
    assert handler.handler(_event(package, "Approved", group="other"))["action"] == "ignored"


def test_in_service_creates_then_repoints_the_monitoring_schedule(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    result = handler.handler(_in_service())
    assert result == {
        "action": "schedule-created",
        "schedule": f"{ENDPOINT}-data-quality",
        "definition": f"{ENDPOINT}-dq-v1",
    }
    definition = sm.real.describe_data_quality_job_definition(JobDefinitionName=f"{ENDPOINT}-dq-v1")
    assert (
        definition["DataQualityBaselineConfig"]["ConstraintsResource"]["S3Uri"]
        == "s3://artifacts/runs/x/constraints.json"
    )
    assert definition["DataQualityJobInput"]["EndpointInput"]["EndpointName"] == ENDPOINT
    schedule = sm.schedules[f"{ENDPOINT}-data-quality"]
    assert schedule["MonitoringType"] == "DataQuality"
    assert schedule["ScheduleConfig"]["ScheduleExpression"] == "cron(0 * ? * * *)"
    # The same event again: nothing to do.
    assert handler.handler(_in_service())["action"] == "none"
    # Version 2 goes live (the recorder only records UpdateEndpoint; make moto's endpoint serve v2 by hand).
    second = _register(sm)
    handler.handler(_approve(sm, second))
    sm.real.delete_endpoint(EndpointName=ENDPOINT)
    sm.real.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=f"{ENDPOINT}-v2")
    assert handler.handler(_in_service())["action"] == "schedule-updated"
    assert sm.schedules[f"{ENDPOINT}-data-quality"]["MonitoringJobDefinitionName"] == f"{ENDPOINT}-dq-v2"


def test_no_schedule_without_a_registered_baseline_or_for_another_endpoint(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm, baseline=False)))
    assert handler.handler(_in_service()) == {"action": "none", "reason": "version 1 has no data-quality baseline"}
    other = {**_in_service(), "detail": {"EndpointName": "other", "EndpointStatus": "IN_SERVICE"}}
    assert handler.handler(other)["action"] == "ignored"
    assert sm.schedules == {}
