"""runtime/approval_deploy/handler.py against moto's SageMaker (registry, models, configs, endpoints, job definitions).

moto 5.2.5 has no UpdateEndpoint and no monitoring schedules: those two calls go to a recorder that wraps the moto
client, so the test still sees exactly what the handler asked SageMaker to do. The recorder can also make the
endpoint look busy or serve another config, and make one call fail as SageMaker does for a second, racing change.
"""

from __future__ import annotations

import json
import logging
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
        self.serving_override: str | None = None
        self.fail: dict[str, ClientError] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def describe_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.real.describe_endpoint(**kwargs)
        if self.status_override:
            result["EndpointStatus"] = self.status_override
        if self.serving_override:
            result["EndpointConfigName"] = self.serving_override
        return result

    def create_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        if "create_endpoint" in self.fail:
            raise self.fail.pop("create_endpoint")
        result: dict[str, Any] = self.real.create_endpoint(**kwargs)
        return result

    def update_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        if "update_endpoint" in self.fail:
            raise self.fail.pop("update_endpoint")
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


def _update_finished(sm: Recorder) -> None:
    """The last recorded UpdateEndpoint completed: the endpoint serves its config and is InService again."""
    sm.serving_override = next(kw["EndpointConfigName"] for name, kw in reversed(sm.calls) if name == "update_endpoint")
    sm.status_override = None


def _config(version: int) -> str:
    """The model and endpoint-config name for a version under the current environment's serving settings."""
    return f"{ENDPOINT}-v{version}-{handler.settings_hash(handler.SERVING_SETTINGS)}"


def _definition(version: int) -> str:
    return f"{ENDPOINT}-dq{version}-{handler.settings_hash(handler.MONITOR_SETTINGS)}"


def _validation(message: str) -> ClientError:
    return ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "UpdateEndpoint")


def test_approved_version_creates_the_endpoint_with_data_capture(sm: Recorder) -> None:
    package = _register(sm)
    result = handler.handler(_approve(sm, package))
    name = _config(package["ModelPackageVersion"])
    assert result == {"action": "created", "endpoint": ENDPOINT, "config": name}
    endpoint = sm.real.describe_endpoint(EndpointName=ENDPOINT)
    assert endpoint["EndpointConfigName"] == name
    tags = sm.real.list_tags(ResourceArn=endpoint["EndpointArn"])["Tags"]
    assert {"Key": handler.TARGET_TAG, "Value": name} in tags
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
def test_rejected_or_pending_other_version_changes_nothing(sm: Recorder, status: str) -> None:
    serving = _register(sm)
    handler.handler(_approve(sm, serving))
    before = sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    candidate = _register(sm)
    result = handler.handler(_approve(sm, candidate, status) if status == "Rejected" else _event(candidate, status))
    assert result == {"action": "none", "reason": f"{before} is already serving"}
    assert sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == before
    assert sm.calls == []
    assert len(sm.real.list_models()["Models"]) == 1


def test_stale_approval_event_of_a_version_rejected_since_deploys_nothing(sm: Recorder) -> None:
    package = _register(sm)
    event = _approve(sm, package)
    sm.real.update_model_package(ModelPackageArn=package["ModelPackageArn"], ModelApprovalStatus="Rejected")
    assert handler.handler(event) == {"action": "ignored", "reason": "no Approved version in the group"}
    assert sm.real.list_endpoints()["Endpoints"] == []


def test_newly_approved_version_updates_the_serving_endpoint(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    second = _register(sm)
    result = handler.handler(_approve(sm, second))
    name = _config(second["ModelPackageVersion"])
    assert result == {"action": "updated", "endpoint": ENDPOINT, "config": name, "previous": _config(1)}
    assert sm.calls == [("update_endpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": name})]
    assert sm.real.describe_endpoint_config(EndpointConfigName=name)["ProductionVariants"][0]["ModelName"] == name


def test_approval_while_updating_is_applied_when_the_endpoint_is_in_service_again(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    sm.status_override = "Updating"
    result = handler.handler(_approve(sm, _register(sm)))
    # Not an error (no retries, no dead letter): the endpoint's own IN_SERVICE event picks it up.
    assert result["action"] == "deferred"
    assert "is Updating" in result["reason"]
    assert len(sm.real.list_models()["Models"]) == 1
    assert sm.calls == []
    sm.status_override = None
    result = handler.handler(_in_service())
    assert result == {
        "action": "updated",
        "endpoint": ENDPOINT,
        "config": _config(2),
        "previous": _config(1),
    }


def test_three_approvals_during_one_update_end_on_the_newest(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    sm.status_override = "Creating"
    for _ in range(3):
        assert handler.handler(_approve(sm, _register(sm)))["action"] == "deferred"
    sm.status_override = None
    assert handler.handler(_in_service())["config"] == _config(4)
    _update_finished(sm)
    assert handler.handler(_in_service())["action"] == "schedule-created"
    assert [name for name, _ in sm.calls].count("update_endpoint") == 1


def test_racing_invocations_defer_instead_of_failing(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    sm.fail["update_endpoint"] = _validation(
        f'Cannot update in-progress endpoint "arn:aws:sagemaker:::endpoint/{ENDPOINT}"'
    )
    result = handler.handler(_approve(sm, _register(sm)))
    assert result["action"] == "deferred"
    assert "in progress" in result["reason"]


def test_racing_first_approvals_create_one_endpoint(sm: Recorder) -> None:
    package = _register(sm)
    event = _approve(sm, package)
    sm.fail["create_endpoint"] = _validation(f'Cannot create already existing endpoint "arn:...:endpoint/{ENDPOINT}"')
    assert handler.handler(event)["action"] == "deferred"
    assert handler.handler(event)["action"] == "created"


def test_rejecting_the_serving_version_rolls_back_to_the_previous_approved(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    second = _register(sm)
    handler.handler(_approve(sm, second))
    _update_finished(sm)
    result = handler.handler(_approve(sm, second, "Rejected"))
    assert result == {
        "action": "updated",
        "endpoint": ENDPOINT,
        "config": _config(1),
        "previous": _config(2),
    }


def test_rejecting_the_only_version_keeps_the_endpoint_and_says_so(
    sm: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    package = _register(sm)
    handler.handler(_approve(sm, package))
    with caplog.at_level(logging.WARNING, logger="approval_deploy"):
        result = handler.handler(_approve(sm, package, "Rejected"))
    assert result["action"] == "no-approved-version"
    assert f"keeps serving {_config(1)}" in result["reason"]
    assert any("no Approved version is left" in r.getMessage() for r in caplog.records)
    assert sm.real.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == _config(1)


def test_update_that_sagemaker_rolled_back_is_logged_not_retried(
    sm: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    handler.handler(_approve(sm, _register(sm)))
    handler.handler(_approve(sm, _register(sm)))
    assert len(sm.calls) == 1
    # The new variant never became healthy: SageMaker rolled back; the endpoint is InService on v1 again.
    with caplog.at_level(logging.ERROR, logger="approval_deploy"):
        result = handler.handler(_in_service())
    assert result["action"] == "schedule-created"  # monitoring follows what serves
    assert any("did not complete" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert len(sm.calls) == 2 and sm.calls[-1][0] == "create_monitoring_schedule"  # no second UpdateEndpoint
    # A newer approval deploys again.
    handler.handler(_approve(sm, _register(sm)))
    assert sm.calls[-1] == ("update_endpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": _config(3)})


def test_other_group_is_ignored(sm: Recorder) -> None:
    package = _register(sm)
    assert handler.handler(_event(package, "Approved", group="other"))["action"] == "ignored"


def test_in_service_creates_then_repoints_the_monitoring_schedule(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    result = handler.handler(_in_service())
    assert result == {
        "action": "schedule-created",
        "schedule": f"{ENDPOINT}-data-quality",
        "definition": _definition(1),
    }
    definition = sm.real.describe_data_quality_job_definition(JobDefinitionName=_definition(1))
    assert (
        definition["DataQualityBaselineConfig"]["ConstraintsResource"]["S3Uri"]
        == "s3://artifacts/runs/x/constraints.json"
    )
    assert definition["DataQualityJobInput"]["EndpointInput"]["EndpointName"] == ENDPOINT
    assert definition["JobResources"]["ClusterConfig"]["VolumeKmsKeyId"] == f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234"
    schedule = sm.schedules[f"{ENDPOINT}-data-quality"]
    assert schedule["MonitoringType"] == "DataQuality"
    assert schedule["ScheduleConfig"]["ScheduleExpression"] == "cron(0 * ? * * *)"
    # The same event again: nothing to do.
    assert handler.handler(_in_service())["action"] == "none"
    # Version 2 goes live.
    handler.handler(_approve(sm, _register(sm)))
    _update_finished(sm)
    assert handler.handler(_in_service())["action"] == "schedule-updated"
    assert sm.schedules[f"{ENDPOINT}-data-quality"]["MonitoringJobDefinitionName"] == _definition(2)


def test_monitoring_on_a_local_nvme_type_takes_no_volume_key(sm: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_VOLUME_KMS", "false")
    handler.handler(_approve(sm, _register(sm)))
    handler.handler(_in_service())
    definition = sm.real.describe_data_quality_job_definition(JobDefinitionName=_definition(1))
    assert "VolumeKmsKeyId" not in definition["JobResources"]["ClusterConfig"]


def test_no_schedule_without_a_registered_baseline_or_for_another_endpoint(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm, baseline=False)))
    assert handler.handler(_in_service()) == {"action": "none", "reason": "version 1 has no data-quality baseline"}
    other = {**_in_service(), "detail": {"EndpointName": "other", "EndpointStatus": "IN_SERVICE"}}
    assert handler.handler(other)["action"] == "ignored"
    assert sm.schedules == {}


def _lambda_text_line(record: logging.LogRecord) -> str:
    """The event the Lambda Python runtime writes for a record in the Text log format (`[LEVEL]\\ttime\\trequest
    id\\tmessage`, AWS Lambda Developer Guide, "Log and monitor Python Lambda functions")."""
    request_id = "8f5a3c1e-0000-4000-8000-000000000000"
    return f"[{record.levelname}]\t2026-12-01T17:00:00.000Z\t{request_id}\t{record.getMessage()}"


def test_the_alarms_metric_filter_matches_the_failed_deployment_line_only(
    sm: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler reports a rolled-back update as a log line of a function that succeeds; the template's metric
    filter (quoted term: the literal text anywhere in the event) must match that line and no other decision."""
    from moto.logs.utils import EventMessageFilter

    from mlstack.constructs.sagemaker.approval_deploy import FAILED_DEPLOYMENT_PATTERN

    assert FAILED_DEPLOYMENT_PATTERN.startswith('"') and FAILED_DEPLOYMENT_PATTERN.endswith('"')
    term = FAILED_DEPLOYMENT_PATTERN[1:-1]
    assert '"' not in term and "\\" not in term
    with caplog.at_level(logging.INFO, logger="approval_deploy"):
        handler.handler(_approve(sm, _register(sm)))  # created
        second = _register(sm)
        handler.handler(_approve(sm, second))  # updated (to v2)
        sm.status_override = "Updating"
        handler.handler(_event(second, "Approved"))  # deferred
        sm.status_override = None
        handler.handler(_in_service())  # SageMaker rolled v2 back: failed-deployment, then schedule-created
    lines = {json.loads(r.getMessage())["action"]: _lambda_text_line(r) for r in caplog.records}
    assert {"created", "updated", "deferred", "failed-deployment", "schedule-created"} <= set(lines), lines
    matcher = EventMessageFilter(FAILED_DEPLOYMENT_PATTERN)
    failed = lines.pop("failed-deployment")
    assert '"action": "failed-deployment"' in failed
    assert matcher.matches(failed) and term in failed
    for action, line in lines.items():
        assert not matcher.matches(line) and term not in line, action


class Responses:
    """CloudFormation's pre-signed response URL: records each PUT the handler sends."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: Any, timeout: float) -> Any:
        assert request.get_method() == "PUT" and request.full_url == "https://cfn-response.example/x"
        assert request.get_header("Content-type") == ""
        self.sent.append(json.loads(request.data))
        return _Closing()


class _Closing:
    def __enter__(self) -> _Closing:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def read(self) -> bytes:
        return b""


@pytest.fixture
def responses(monkeypatch: pytest.MonkeyPatch) -> Responses:
    recorder = Responses()
    monkeypatch.setattr("urllib.request.urlopen", recorder)
    return recorder


def _stack_event(request_type: str = "Update") -> dict[str, Any]:
    """What the stack's Custom::EndpointReconcile sends when a deploy changes the settings."""
    return {
        "RequestType": request_type,
        "ResponseURL": "https://cfn-response.example/x",
        "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/mlops/1",
        "RequestId": "r-1",
        "LogicalResourceId": "ApprovalDeployReconcile",
        "PhysicalResourceId": f"{ENDPOINT}-reconcile",
        "ResourceType": "Custom::EndpointReconcile",
        "ResourceProperties": {"INSTANCE_TYPE": "ml.m5.xlarge"},
    }


def _serving_and_monitored(sm: Recorder) -> None:
    handler.handler(_approve(sm, _register(sm)))
    assert handler.handler(_in_service())["action"] == "schedule-created"
    sm.calls.clear()


def test_deploy_with_a_new_instance_type_creates_a_config_and_updates_the_endpoint(
    sm: Recorder, responses: Responses, monkeypatch: pytest.MonkeyPatch
) -> None:
    _serving_and_monitored(sm)
    old = _config(1)
    monkeypatch.setenv("INSTANCE_TYPE", "ml.m5.xlarge")
    new = _config(1)
    assert new != old and len(f"{'x' * 40}-serving-dq99999-{handler.settings_hash(handler.MONITOR_SETTINGS)}") <= 63
    result = handler.handler(_stack_event())
    assert result == {"action": "updated", "endpoint": ENDPOINT, "config": new, "previous": old}
    assert sm.calls == [("update_endpoint", {"EndpointName": ENDPOINT, "EndpointConfigName": new})]
    variant = sm.real.describe_endpoint_config(EndpointConfigName=new)["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.m5.xlarge" and variant["ModelName"] == new
    assert responses.sent == [
        {
            "Status": "SUCCESS",
            "Reason": "updated",
            "PhysicalResourceId": f"{ENDPOINT}-reconcile",
            "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/mlops/1",
            "RequestId": "r-1",
            "LogicalResourceId": "ApprovalDeployReconcile",
            "Data": {"Action": "updated"},
        }
    ]
    # The endpoint's IN_SERVICE event after the update finds nothing more to change on the endpoint.
    _update_finished(sm)
    assert handler.handler(_in_service())["action"] == "none"


def test_deploy_with_unchanged_settings_creates_nothing(sm: Recorder, responses: Responses) -> None:
    _serving_and_monitored(sm)
    configs = sm.real.list_endpoint_configs()["EndpointConfigs"]
    definitions = sm.real.list_data_quality_job_definitions()["JobDefinitionSummaries"]
    result = handler.handler(_stack_event())
    assert result["action"] == "none"
    assert sm.calls == []
    assert sm.real.list_endpoint_configs()["EndpointConfigs"] == configs
    assert sm.real.list_data_quality_job_definitions()["JobDefinitionSummaries"] == definitions
    assert [r["Status"] for r in responses.sent] == ["SUCCESS"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MONITOR_IMAGE", "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer:v2"),
        ("MONITOR_INSTANCE_TYPE", "ml.m5.xlarge"),
        ("MONITOR_SCHEDULE", "cron(0 */6 ? * * *)"),
    ],
)
def test_deploy_with_new_monitoring_settings_repoints_the_schedule(
    sm: Recorder, responses: Responses, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    _serving_and_monitored(sm)
    monkeypatch.setenv(variable, value)
    assert handler.handler(_stack_event()) == {
        "action": "schedule-updated",
        "schedule": f"{ENDPOINT}-data-quality",
        "definition": _definition(1),
    }
    schedule = sm.schedules[f"{ENDPOINT}-data-quality"]
    assert schedule["ScheduleConfig"]["ScheduleExpression"] == handler.env("MONITOR_SCHEDULE", "cron(0 * ? * * *)")
    definition = sm.real.describe_data_quality_job_definition(JobDefinitionName=_definition(1))
    assert definition["DataQualityAppSpecification"]["ImageUri"] == handler.env("MONITOR_IMAGE")
    assert definition["JobResources"]["ClusterConfig"]["InstanceType"] == handler.env("MONITOR_INSTANCE_TYPE")


def test_stack_event_answers_cloudformation_even_when_the_reconcile_fails(
    sm: Recorder, responses: Responses, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler.handler(_approve(sm, _register(sm)))
    sm.fail["update_endpoint"] = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "X")
    monkeypatch.setenv("INSTANCE_COUNT", "2")
    with caplog.at_level(logging.ERROR, logger="approval_deploy"):
        result = handler.handler(_stack_event("Create"))
    assert result["action"] == "failed-deployment" and "ThrottlingException" in result["reason"]
    assert any('"failed-deployment"' in r.getMessage() for r in caplog.records)  # the alarm's metric filter
    assert [r["Status"] for r in responses.sent] == ["SUCCESS"]
    assert handler.handler(_stack_event("Delete"))["action"] == "ignored"
    assert len(responses.sent) == 2
