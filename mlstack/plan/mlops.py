"""`plan_mlops`: the MLOps layer's part of `mlstack plan` (pipeline steps, instance-hours per run, endpoint, quotas).

SageMaker bills ml.* training, processing and hosting at its own rates. The endpoint is priced at the catalog's
dated SageMaker hosting rate where it has one; training and processing have no dated rate, so the cost per run
stays unknown and the plan shows instance-hours per run and a dated EC2 on-demand lower bound, labelled as such,
instead of a guessed SageMaker figure.
"""

from __future__ import annotations

from mlstack.catalog import get_instance
from mlstack.catalog.hosting_prices import hosting_price
from mlstack.catalog.prices import price as dated_price
from mlstack.config import BlueprintConfig
from mlstack.design.mlops import mlops_names
from mlstack.plan.model import Cost, Plan, Quota, Resource

STACK = "MlopsStack"
QUOTA_CODE_UNKNOWN = "unknown"
NO_SAGEMAKER_PRICE = "no dated SageMaker ml.* rate for it in the catalog (EC2 rates do not stand in); left unknown"


def plan_mlops(config: BlueprintConfig, plan: Plan) -> None:
    mlops = config.mlops
    if mlops is None:
        return
    pipeline = mlops.pipeline
    training = pipeline.training
    name = config.name
    names = mlops_names(name)
    plan.resources += [
        Resource(STACK, "S3 bucket", "artifacts: runs/, capture/, monitoring/ (project KMS key, versioned, retained)"),
        Resource(STACK, "S3 bucket", "access logs (SSE-S3, retained)"),
        Resource(STACK, "Model package group", f"{names.model_package_group} (registry, retained)"),
        Resource(STACK, "SageMaker pipeline", f"{names.pipeline}: Preprocess, Train, Evaluate, Baseline, Register"),
        Resource(STACK, "Lambda function", f"approval-to-deploy and monitoring for endpoint {names.endpoint}"),
        Resource(STACK, "EventBridge rule", "model package approved or rejected; endpoint in service", 2),
        Resource(STACK, "SQS queue", "dead letters of the deploy function (project KMS key)"),
        Resource(STACK, "SNS topic", f"alarms (project KMS key): {_subscribers(mlops.alarm_emails)}"),
        Resource(
            STACK,
            "CloudWatch alarm",
            "deploy function errors; messages in its dead-letter queue; a deployment SageMaker rolled back",
            3,
        ),
        Resource(
            STACK,
            "EventBridge rule",
            "to the alarm topic: failed pipeline execution; endpoint failed; monitoring violations or failure",
            3,
        ),
    ]
    if not mlops.alarm_emails:
        plan.warnings.append(
            "MlopsStack: alarm_emails is empty: failed pipeline runs, deploy errors and monitoring violations reach "
            "the alarm topic, which no one is subscribed to; set mlops.alarm_emails or subscribe to output "
            "AlarmTopicArn"
        )
    if mlops.studio is not None:
        plan.resources.append(
            Resource(STACK, "Studio domain", f"VpcOnly, IAM auth, users: {', '.join(mlops.studio.users) or 'none'}")
        )
    steps = [
        ("Preprocess", pipeline.processing_instance_type, 1, pipeline.processing_hours),
        ("Train", training.instance_type, training.instance_count, training.expected_hours),
        ("Evaluate", pipeline.processing_instance_type, 1, pipeline.processing_hours),
        ("Baseline", pipeline.processing_instance_type, 1, pipeline.processing_hours),
    ]
    rows: list[str] = []
    floor = 0.0
    floor_known = True
    for step, instance_type, count, hours in steps:
        it = get_instance(instance_type)
        extra = ""
        if step == "Train":
            extra = ", torchrun" if training.distribution == "torchrun" else ""
            extra += ", EFA" if count > 1 and it.efa_supported else ""
            extra += ", managed Spot" if training.spot else ""
            extra += ", checkpoints to S3" if training.checkpoints else ""
        rows.append(f"{step}: {count} x {instance_type}{extra}, ~{count * hours:g} instance-hours")
        ec2 = dated_price(it.name, "ec2_on_demand", config.env.region)
        if ec2 is None:
            floor_known = False
        else:
            floor += ec2.usd_per_hour * count * hours
    rows.append("Register (if accuracy >= threshold): no instance")
    rows.append(f"cost per run: unknown ({NO_SAGEMAKER_PRICE})")
    if floor_known:
        rows.append(
            f"EC2 on-demand list-price lower bound per run: ${floor:,.2f} (SageMaker ml.* rates are higher; "
            "Spot lowers training)"
        )
    serving = mlops.serving
    rows.append(
        f"feeds endpoint {names.endpoint}: {serving.instance_count} x {serving.instance_type}, "
        f"data capture {serving.capture_percent}% (created on the first approval)"
    )
    rows.append(f"data-quality monitoring: {mlops.monitoring.schedule} on {mlops.monitoring.instance_type}")
    plan.details.setdefault("sections", []).append(("MLOps pipeline run", rows))
    plan.details["sections"].append(("MLOps tear down (before cdk destroy)", teardown_commands(name)))
    plan.details["mlops"] = {
        "steps": [{"step": s, "instance_type": t, "instance_count": c, "expected_hours": h} for s, t, c, h in steps],
        "cost_per_run": None,
        "ec2_floor_per_run": round(floor, 2) if floor_known else None,
        "endpoint": names.endpoint,
    }
    hosting = hosting_price(serving.instance_type, config.env.region)
    plan.costs.append(
        Cost(
            f"endpoint {names.endpoint}: {serving.instance_count} x {serving.instance_type} (after first approval)",
            serving.instance_count,
            None if hosting is None else hosting.usd_per_hour,
            None if hosting is None else hosting.as_of,
            NO_SAGEMAKER_PRICE if hosting is None else hosting.source,
        )
    )
    plan.quotas.append(
        Quota(
            "sagemaker",
            f"{training.instance_type} for {'spot ' if training.spot else ''}training job usage",
            QUOTA_CODE_UNKNOWN,
            training.instance_count,
            "instances",
        )
    )
    plan.quotas.append(
        Quota(
            "sagemaker",
            f"{pipeline.processing_instance_type} for processing job usage",
            QUOTA_CODE_UNKNOWN,
            1,
            "instances",
        )
    )
    plan.quotas.append(
        Quota(
            "sagemaker",
            f"{serving.instance_type} for endpoint usage",
            QUOTA_CODE_UNKNOWN,
            serving.instance_count,
            "instances",
        )
    )


def teardown_commands(name: str) -> list[str]:
    """What `cdk destroy` leaves to the user, in order (the README's "Tear down" lists the same commands).

    The deploy function creates the endpoint, its configs and models, the data-quality definitions and the schedule;
    CloudFormation deletes none of them. The endpoint keeps billing, and its ENIs hold the endpoint security group,
    so `cdk destroy` ends DELETE_FAILED until the endpoint is gone. The model package group keeps its fixed name
    after a destroy (retained), so a redeploy of the same blueprint fails with AlreadyExists until it is removed.
    """
    names = mlops_names(name)
    endpoint, group = names.endpoint, names.model_package_group
    schedule = f"{endpoint}-data-quality"
    return [
        f"aws sagemaker delete-monitoring-schedule --monitoring-schedule-name {schedule}",
        f"while aws sagemaker describe-monitoring-schedule --monitoring-schedule-name {schedule} >/dev/null 2>&1; "
        "do sleep 10; done",
        f"for d in $(aws sagemaker list-data-quality-job-definitions --endpoint-name {endpoint} "
        "--query 'JobDefinitionSummaries[].MonitoringJobDefinitionName' --output text); do "
        'aws sagemaker delete-data-quality-job-definition --job-definition-name "$d"; done',
        f"aws sagemaker delete-endpoint --endpoint-name {endpoint}",
        f"aws sagemaker wait endpoint-deleted --endpoint-name {endpoint}",
        f"for c in $(aws sagemaker list-endpoint-configs --name-contains {endpoint}-v "
        "--query 'EndpointConfigs[].EndpointConfigName' --output text); do "
        'aws sagemaker delete-endpoint-config --endpoint-config-name "$c"; done',
        f"for m in $(aws sagemaker list-models --name-contains {endpoint}-v --query 'Models[].ModelName' "
        '--output text); do aws sagemaker delete-model --model-name "$m"; done',
        f"npx cdk destroy -c blueprint={name} MlopsStack",
        f"before a redeploy: the retained group {group} blocks it (AlreadyExists); if its versions are not "
        f"needed: for p in $(aws sagemaker list-model-packages --model-package-group-name {group} "
        "--query 'ModelPackageSummaryList[].ModelPackageArn' --output text); do "
        'aws sagemaker delete-model-package --model-package-name "$p"; done; '
        f"aws sagemaker delete-model-package-group --model-package-group-name {group}",
    ]


def _subscribers(emails: list[str]) -> str:
    return f"e-mail to {', '.join(emails)}" if emails else "no subscriber (alarm_emails is empty)"
