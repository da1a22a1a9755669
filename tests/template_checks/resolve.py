"""Synthesized templates with their intrinsic functions replaced by plausible values, for checkers that read plain
JSON (IAM policy lint, the States Language validator).

A `Ref` or `Fn::GetAtt` becomes what CloudFormation would return for that resource type, built from the
resource's own physical-name property where it sets one and from its logical ID otherwise, so an ARN keeps the
shape a checker matches against (`arn:aws:logs:<region>:<account>:log-group:<name>:*`). A cross-stack
`Fn::GetStackOutput` is resolved in the stack that exports it. A reference this module cannot shape raises
`UnresolvableError`: add the type to the tables below rather than guess.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
"""The account of a blueprint that names none (the templates then say `AWS::AccountId`)."""

NAME_PROPERTY = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::IAM::Role": "RoleName",
    "AWS::EKS::Cluster": "Name",
    "AWS::Events::Rule": "Name",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SageMaker::Endpoint": "EndpointName",
    "AWS::SageMaker::Model": "ModelName",
    "AWS::SageMaker::ModelPackageGroup": "ModelPackageGroupName",
    "AWS::SageMaker::Pipeline": "PipelineName",
    "AWS::SageMaker::Cluster": "ClusterName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::Batch::JobQueue": "JobQueueName",
    "AWS::Batch::JobDefinition": "JobDefinitionName",
    "AWS::Batch::ComputeEnvironment": "ComputeEnvironmentName",
}
"""Resource type -> the property that sets its physical name (the name part of its ARN)."""

ARN_FORMAT = {
    "AWS::S3::Bucket": "arn:{p}:s3:::{name}",
    "AWS::Logs::LogGroup": "arn:{p}:logs:{r}:{a}:log-group:{name}:*",  # GetAtt Arn ends in :* (CloudFormation)
    "AWS::Lambda::Function": "arn:{p}:lambda:{r}:{a}:function:{name}",
    "AWS::SQS::Queue": "arn:{p}:sqs:{r}:{a}:{name}",
    "AWS::IAM::Role": "arn:{p}:iam::{a}:role/{name}",
    "AWS::EKS::Cluster": "arn:{p}:eks:{r}:{a}:cluster/{name}",
    "AWS::Events::Rule": "arn:{p}:events:{r}:{a}:rule/{name}",
    "AWS::SNS::Topic": "arn:{p}:sns:{r}:{a}:{name}",
    "AWS::SageMaker::Endpoint": "arn:{p}:sagemaker:{r}:{a}:endpoint/{name}",
    "AWS::SageMaker::Model": "arn:{p}:sagemaker:{r}:{a}:model/{name}",
    "AWS::SageMaker::ModelPackageGroup": "arn:{p}:sagemaker:{r}:{a}:model-package-group/{name}",
    "AWS::SageMaker::Pipeline": "arn:{p}:sagemaker:{r}:{a}:pipeline/{name}",
    "AWS::SageMaker::Cluster": "arn:{p}:sagemaker:{r}:{a}:cluster/{name}",
    "AWS::StepFunctions::StateMachine": "arn:{p}:states:{r}:{a}:stateMachine:{name}",
    "AWS::DynamoDB::Table": "arn:{p}:dynamodb:{r}:{a}:table/{name}",
    "AWS::SecretsManager::Secret": "arn:{p}:secretsmanager:{r}:{a}:secret:{name}-AbCdEf",
    "AWS::ECR::Repository": "arn:{p}:ecr:{r}:{a}:repository/{name}",
    "AWS::KMS::Key": "arn:{p}:kms:{r}:{a}:key/{name}",
    "AWS::Batch::JobQueue": "arn:{p}:batch:{r}:{a}:job-queue/{name}",
    "AWS::Batch::JobDefinition": "arn:{p}:batch:{r}:{a}:job-definition/{name}:1",
    "AWS::Batch::ComputeEnvironment": "arn:{p}:batch:{r}:{a}:compute-environment/{name}",
}
"""Resource type -> the ARN CloudFormation returns for it (`Fn::GetAtt X.Arn`, or `Ref` where that is the ARN)."""

REF_IS_ARN = frozenset(
    {
        "AWS::SNS::Topic",
        "AWS::SageMaker::Endpoint",
        "AWS::SageMaker::Model",
        "AWS::SageMaker::ModelPackageGroup",
        "AWS::StepFunctions::StateMachine",
        "AWS::Batch::JobQueue",
        "AWS::Batch::JobDefinition",
        "AWS::Batch::ComputeEnvironment",
        "AWS::SecretsManager::Secret",
    }
)
"""Types whose `Ref` returns the ARN (each type's "Return values" in the CloudFormation Template Reference)."""

ID_ATTRIBUTES = {
    "GroupId": "sg-{h}",
    "DefaultSecurityGroup": "sg-{h}",
    "VpcId": "vpc-{h}",
    "KeyId": "{uuid}",
    "ClusterSecurityGroupId": "sg-{h}",
}
"""`Fn::GetAtt` attributes that are IDs, not ARNs."""


class UnresolvableError(ValueError):
    """A reference whose value this module cannot shape."""


@dataclass
class Stack:
    """One synthesized stack and where it deploys."""

    name: str
    template: dict[str, Any]
    region: str
    account: str = ACCOUNT
    partition: str = "aws"
    others: Mapping[str, Stack] = field(default_factory=dict)
    """Stack name -> stack, for `Fn::GetStackOutput`."""

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.template.get("Resources", {})
        return resources


def _hex(logical_id: str) -> str:
    return hashlib.sha256(logical_id.encode()).hexdigest()[:17]


def _uuid(logical_id: str) -> str:
    h = hashlib.sha256(logical_id.encode()).hexdigest()[:32]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def physical_name(stack: Stack, logical_id: str) -> str:
    resource = stack.resources[logical_id]
    prop = NAME_PROPERTY.get(resource["Type"])
    given = resource.get("Properties", {}).get(prop) if prop else None
    if given is not None:
        value = resolve(stack, given)
        if isinstance(value, str):
            return value
    if resource["Type"] == "AWS::KMS::Key":
        return _uuid(logical_id)
    return re.sub(r"[^a-z0-9-]", "-", logical_id.lower())[:60]


def _arn(stack: Stack, logical_id: str) -> str:
    kind = stack.resources[logical_id]["Type"]
    if kind not in ARN_FORMAT:
        raise UnresolvableError(f"{stack.name}: no ARN format for {kind} ({logical_id}); add it to ARN_FORMAT")
    return ARN_FORMAT[kind].format(
        p=stack.partition, r=stack.region, a=stack.account, name=physical_name(stack, logical_id)
    )


def _ref(stack: Stack, name: str) -> Any:
    pseudo = {
        "AWS::AccountId": stack.account,
        "AWS::Region": stack.region,
        "AWS::Partition": stack.partition,
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": stack.name,
        "AWS::StackId": f"arn:{stack.partition}:cloudformation:{stack.region}:{stack.account}:stack/{stack.name}/id",
    }
    if name in pseudo:
        return pseudo[name]
    parameters = stack.template.get("Parameters", {})
    if name in parameters:
        return parameters[name].get("Default", f"parameter-{name.lower()}")
    if name not in stack.resources:
        raise UnresolvableError(f"{stack.name}: Ref to unknown {name}")
    kind = stack.resources[name]["Type"]
    if kind in REF_IS_ARN:
        return _arn(stack, name)
    if kind == "AWS::KMS::Key":
        return _uuid(name)
    if kind in ("AWS::EC2::SecurityGroup", "AWS::EC2::VPC", "AWS::EC2::Subnet"):
        prefix = {"AWS::EC2::SecurityGroup": "sg", "AWS::EC2::VPC": "vpc", "AWS::EC2::Subnet": "subnet"}[kind]
        return f"{prefix}-{_hex(name)}"
    return physical_name(stack, name)


def get_att(stack: Stack, logical_id: str, attribute: str) -> Any:
    if logical_id not in stack.resources:
        raise UnresolvableError(f"{stack.name}: GetAtt of unknown {logical_id}")
    if attribute == "Arn":
        return _arn(stack, logical_id)
    if attribute in ID_ATTRIBUTES:
        return ID_ATTRIBUTES[attribute].format(h=_hex(logical_id + attribute), uuid=_uuid(logical_id))
    if attribute == "ClusterArn" and stack.resources[logical_id].get("Type") == "AWS::SageMaker::Cluster":
        return _arn(stack, logical_id)
    if attribute == "CidrBlock":
        return "10.0.0.0/16"
    if attribute.endswith("Arn"):
        raise UnresolvableError(f"{stack.name}: no ARN for GetAtt {logical_id}.{attribute}; add it to resolve.get_att")
    # Names, endpoints, IDs: no checker matches their shape, only that they are plain strings.
    return f"{physical_name(stack, logical_id)}-{attribute.lower().replace('.', '-')}"


def _sub(stack: Stack, args: Any) -> str:
    text, variables = (args, {}) if isinstance(args, str) else (args[0], args[1])

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return str(resolve(stack, variables[name]))
        if "." in name:
            return str(get_att(stack, *name.split(".", 1)))
        return str(_ref(stack, name))

    return re.sub(r"\$\{([^}]+)\}", value, text)


def _stack_output(stack: Stack, args: Mapping[str, Any]) -> Any:
    producer = stack.others.get(args["StackName"])
    if producer is None:
        raise UnresolvableError(f"{stack.name}: Fn::GetStackOutput from unknown stack {args['StackName']}")
    return resolve(producer, producer.template["Outputs"][args["OutputName"]]["Value"])


def resolve(stack: Stack, value: Any) -> Any:
    """`value` (any part of `stack`'s template) with every intrinsic function replaced by a plain value."""
    if isinstance(value, list):
        return [resolve(stack, v) for v in value if v != {"Ref": "AWS::NoValue"}]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, args),) = value.items()
        if key == "Ref":
            return _ref(stack, args)
        if key == "Fn::GetAtt":
            logical_id, attribute = args if isinstance(args, list) else args.split(".", 1)
            return get_att(stack, logical_id, attribute)
        if key == "Fn::Join":
            return str(args[0]).join(str(resolve(stack, v)) for v in resolve(stack, args[1]))
        if key == "Fn::Sub":
            return _sub(stack, args)
        if key == "Fn::Select":
            return resolve(stack, args[1])[int(resolve(stack, args[0]))]
        if key == "Fn::Split":
            return str(resolve(stack, args[1])).split(args[0])
        if key == "Fn::GetAZs":
            return [f"{stack.region}{zone}" for zone in "abc"]
        if key == "Fn::GetStackOutput":
            return _stack_output(stack, args)
        if key == "Fn::ImportValue":
            return f"imported-{resolve(stack, args)}"
        if key == "Fn::Base64":
            return resolve(stack, args)
        if key.startswith("Fn::"):
            raise UnresolvableError(f"{stack.name}: {key} is not resolved; add it to resolve.resolve")
    return {k: resolve(stack, v) for k, v in value.items() if v != {"Ref": "AWS::NoValue"}}


def policy_documents(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(property path, document) of every IAM policy document in a resource's properties."""
    if isinstance(value, dict):
        if "Statement" in value:
            yield path, value
            return
        for key, child in value.items():
            yield from policy_documents(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from policy_documents(child, f"{path}[{i}]")


def session_stacks(blueprints: Mapping[str, Any]) -> list[tuple[str, Stack]]:
    """(`<blueprint>/<stack ID>`, Stack) for every synthesized stack of a test session's blueprints
    (`Session.blueprints`), each able to resolve the outputs of the others."""
    stacks: dict[str, Stack] = {}
    labels: dict[str, str] = {}
    for name, item in blueprints.items():
        for built in item.stacks.values():
            if built.construct_id not in item.templates:
                continue
            account = built.account if re.fullmatch(r"\d{12}", built.account) else ACCOUNT
            stacks[built.stack_name] = Stack(
                built.stack_name, item.templates[built.construct_id], built.region, account
            )
            labels[built.stack_name] = f"{name}/{built.construct_id}"
    for stack in stacks.values():
        stack.others = stacks
    return [(labels[stack_name], stack) for stack_name, stack in stacks.items()]
