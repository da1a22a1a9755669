"""CloudFormation custom resource: a log group that another writer may create first, made ready idempotently.

The Container Insights add-on's Fluent Bit creates `/aws/containerinsights/<cluster>/application` itself
(`auto_create_group true` in the add-on's application-log configuration), with no retention and no key. A stack
that owns the group as `AWS::Logs::LogGroup` then fails with "already exists" on an update of a running cluster
and on a redeploy after the group was retained. This handler instead creates the group when it is missing
(CreateLogGroup, `ResourceAlreadyExistsException` ignored), then associates the KMS key and sets the retention
on whichever group is there (AssociateKmsKey, PutRetentionPolicy; CloudWatch Logs API Reference). On Delete it
does nothing: the group and its logs stay, like every log group of the stack.

It answers CloudFormation itself (a PUT of the result to the request's pre-signed `ResponseURL`, CloudFormation
User Guide, "Custom resources": response objects), on every path, so a failed call fails the deploy at once
instead of leaving the stack waiting for the response.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import boto3


def handler(event: dict[str, Any], context: Any) -> None:
    props = event.get("ResourceProperties", {})
    name = str(props.get("LogGroupName", ""))
    physical_id = str(event.get("PhysicalResourceId") or name or event.get("LogicalResourceId", "log-group"))
    status, reason = "SUCCESS", ""
    try:
        if event["RequestType"] in ("Create", "Update"):
            ensure(boto3.client("logs"), name, int(props["RetentionInDays"]), str(props["KmsKeyArn"]))
            physical_id = name
        # Delete: nothing. The group keeps its logs (the stack retains its log groups), and Fluent Bit would
        # create it again while the add-on still runs.
    except Exception as error:  # every failure becomes a FAILED response, with its reason in the stack events
        status, reason = "FAILED", f"{type(error).__name__}: {error}"[:1000]
    respond(event, context, status, reason, physical_id)


def ensure(logs: Any, name: str, retention_days: int, key_arn: str) -> None:
    """The group exists, encrypted with `key_arn`, keeping `retention_days` of logs, whoever created it."""
    try:
        logs.create_log_group(logGroupName=name, kmsKeyId=key_arn)
    except logs.exceptions.ResourceAlreadyExistsException:
        # Created by Fluent Bit (or kept from an earlier stack): take it over as it is.
        logs.associate_kms_key(logGroupName=name, kmsKeyId=key_arn)
    logs.put_retention_policy(logGroupName=name, retentionInDays=retention_days)


def respond(event: dict[str, Any], context: Any, status: str, reason: str, physical_id: str) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or f"see log stream {getattr(context, 'log_stream_name', '')}",
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"],
        data=body,
        method="PUT",
        # The pre-signed URL is signed with an empty content type.
        headers={"Content-Type": "", "Content-Length": str(len(body))},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
