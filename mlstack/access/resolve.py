"""Resolve CloudFormation intrinsics across the stacks of one blueprint, with a fixed account.

`mlstack access` needs concrete ARNs to match policies against: every `Ref`, `Fn::GetAtt`, `Fn::Join`,
`Fn::Sub`, `Fn::Select`, `Fn::Split`, `Fn::If`, `Fn::ImportValue` and `Fn::GetStackOutput` is evaluated here
with account 123456789012, the blueprint's region, and physical names taken from the template (a name
property where the template sets one, the logical ID otherwise). The return values follow each resource
type's "Return values" section of the CloudFormation resource reference
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-template-resource-type-ref.html).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
PARTITION = "aws"

# type -> (property that names the resource, ARN pattern with {name}, whether Ref returns the ARN)
_TYPES: dict[str, tuple[str | None, str, bool]] = {
    "AWS::S3::Bucket": ("BucketName", "arn:aws:s3:::{name}", False),
    "AWS::IAM::Role": ("RoleName", "arn:aws:iam::{account}:role/{name}", False),
    "AWS::IAM::InstanceProfile": ("InstanceProfileName", "arn:aws:iam::{account}:instance-profile/{name}", False),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName", "arn:aws:iam::{account}:policy/{name}", True),
    "AWS::KMS::Key": (None, "arn:aws:kms:{region}:{account}:key/{name}", False),
    "AWS::SNS::Topic": ("TopicName", "arn:aws:sns:{region}:{account}:{name}", True),
    "AWS::SQS::Queue": ("QueueName", "arn:aws:sqs:{region}:{account}:{name}", False),
    "AWS::Logs::LogGroup": ("LogGroupName", "arn:aws:logs:{region}:{account}:log-group:{name}:*", False),
    "AWS::Lambda::Function": ("FunctionName", "arn:aws:lambda:{region}:{account}:function:{name}", False),
    "AWS::StepFunctions::StateMachine": (
        "StateMachineName",
        "arn:aws:states:{region}:{account}:stateMachine:{name}",
        True,
    ),
    "AWS::DynamoDB::Table": ("TableName", "arn:aws:dynamodb:{region}:{account}:table/{name}", False),
    "AWS::SageMaker::Endpoint": ("EndpointName", "arn:aws:sagemaker:{region}:{account}:endpoint/{lname}", True),
    "AWS::SageMaker::EndpointConfig": (
        "EndpointConfigName",
        "arn:aws:sagemaker:{region}:{account}:endpoint-config/{lname}",
        True,
    ),
    "AWS::SageMaker::Model": ("ModelName", "arn:aws:sagemaker:{region}:{account}:model/{lname}", True),
    "AWS::SageMaker::Pipeline": ("PipelineName", "arn:aws:sagemaker:{region}:{account}:pipeline/{lname}", False),
    "AWS::SageMaker::ModelPackageGroup": (
        "ModelPackageGroupName",
        "arn:aws:sagemaker:{region}:{account}:model-package-group/{lname}",
        True,
    ),
    "AWS::SageMaker::Cluster": ("ClusterName", "arn:aws:sagemaker:{region}:{account}:cluster/{lname}", False),
    "AWS::EKS::Cluster": ("Name", "arn:aws:eks:{region}:{account}:cluster/{name}", False),
    "AWS::Batch::ComputeEnvironment": (
        "ComputeEnvironmentName",
        "arn:aws:batch:{region}:{account}:compute-environment/{name}",
        True,
    ),
    # The cluster's name and a UUID follow in the ARN (Amazon EKS API Reference, Nodegroup: nodegroupArn).
    "AWS::EKS::Nodegroup": (
        "NodegroupName",
        "arn:aws:eks:{region}:{account}:nodegroup/{cluster}/{name}/0a1b2c3d",
        False,
    ),
    # Ref returns the ARN; Secrets Manager appends six random characters to the name.
    "AWS::SecretsManager::Secret": ("Name", "arn:aws:secretsmanager:{region}:{account}:secret:{name}-AbCdEf", True),
    "AWS::ECR::Repository": ("RepositoryName", "arn:aws:ecr:{region}:{account}:repository/{name}", False),
    "AWS::Events::Rule": ("Name", "arn:aws:events:{region}:{account}:rule/{name}", False),
    "AWS::FSx::FileSystem": (None, "arn:aws:fsx:{region}:{account}:file-system/{name}", False),
    "AWS::EC2::VPC": (None, "arn:aws:ec2:{region}:{account}:vpc/{name}", False),
    "AWS::EC2::Subnet": (None, "arn:aws:ec2:{region}:{account}:subnet/{name}", False),
    "AWS::EC2::SecurityGroup": (None, "arn:aws:ec2:{region}:{account}:security-group/{name}", False),
}
_ATTR_NAME = {
    "Name", "ModelName", "EndpointName", "EndpointConfigName", "TopicName", "QueueName", "GroupName", "NodegroupName",
}  # fmt: skip


class UnresolvableError(ValueError):
    """An intrinsic this resolver does not know (the caller reports the value it was in)."""


@dataclass
class Stacks:
    """The templates of one blueprint by CloudFormation stack name, and the region they deploy to."""

    templates: dict[str, dict[str, Any]]
    region: str
    account: str = ACCOUNT
    _exports: dict[str, tuple[str, Any]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if isinstance(export, str):
                    self._exports[export] = (stack, output["Value"])

    def resources(self, stack: str) -> dict[str, dict[str, Any]]:
        resources: dict[str, dict[str, Any]] = self.templates[stack].get("Resources", {})
        return resources

    def all_resources(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(stack, logical ID, resource) for every resource of every stack."""
        return [(s, lid, r) for s in self.templates for lid, r in self.resources(s).items()]

    def resolve(self, stack: str, value: Any) -> Any:
        """`value` with every intrinsic evaluated; strings stay strings, lists stay lists."""
        if isinstance(value, list):
            return [self.resolve(stack, v) for v in value if not _is_no_value(v)]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" or key.startswith("Fn::"):
                return self._intrinsic(stack, key, arg)
        return {k: self.resolve(stack, v) for k, v in value.items() if not _is_no_value(v)}

    def text(self, stack: str, value: Any) -> str:
        resolved = self.resolve(stack, value)
        if not isinstance(resolved, str):
            raise UnresolvableError(f"expected a string, got {resolved!r}")
        return resolved

    def name(self, stack: str, logical_id: str) -> str:
        """The physical name of a resource: its name property where the template sets one."""
        resource = self.resources(stack)[logical_id]
        prop = _TYPES.get(resource["Type"], (None, "", False))[0]
        given = resource.get("Properties", {}).get(prop) if prop else None
        if given is not None:
            return self.text(stack, given)
        if resource["Type"] == "AWS::S3::Bucket":
            return f"{stack}-{logical_id}".lower()[:63]
        return logical_id

    def arn(self, stack: str, logical_id: str) -> str:
        resource = self.resources(stack)[logical_id]
        pattern = _TYPES.get(resource["Type"], (None, "", False))[1]
        if not pattern:
            raise UnresolvableError(f"no ARN known for {resource['Type']} {logical_id}")
        name = self.name(stack, logical_id)
        cluster = self.text(stack, resource["Properties"]["ClusterName"]) if "{cluster}" in pattern else ""
        return pattern.format(region=self.region, account=self.account, name=name, lname=name.lower(), cluster=cluster)

    def find(self, stack: str, logical_id: str) -> dict[str, Any]:
        return self.resources(stack)[logical_id]

    def _intrinsic(self, stack: str, key: str, arg: Any) -> Any:
        if key == "Ref":
            return self._ref(stack, arg)
        if key == "Fn::GetAtt":
            logical_id, attr = arg if isinstance(arg, list) else arg.split(".", 1)
            return self._get_att(stack, logical_id, attr)
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(p) for p in self.resolve(stack, parts))
        if key == "Fn::Sub":
            return self._sub(stack, arg)
        if key == "Fn::Select":
            index, items = arg
            return self.resolve(stack, items)[int(self.resolve(stack, index))]
        if key == "Fn::Split":
            sep, source = arg
            return self.text(stack, source).split(sep)
        if key == "Fn::If":
            # Conditions depend on deploy-time parameters; the first branch is the one CDK's defaults take.
            return self.resolve(stack, arg[1])
        if key == "Fn::Base64":
            return self.resolve(stack, arg)
        if key == "Fn::ImportValue":
            name = self.text(stack, arg)
            if name not in self._exports:
                raise UnresolvableError(f"no stack exports {name}")
            other, value = self._exports[name]
            return self.resolve(other, value)
        if key == "Fn::GetStackOutput":
            other = self.text(stack, arg["StackName"])
            output = self.text(stack, arg["OutputName"])
            if other not in self.templates or output not in self.templates[other].get("Outputs", {}):
                raise UnresolvableError(f"no output {output} in stack {other}")
            return self.resolve(other, self.templates[other]["Outputs"][output]["Value"])
        if key == "Fn::FindInMap":
            name, top, second = (self.resolve(stack, a) for a in arg)
            return self.templates[stack]["Mappings"][name][top][second]
        raise UnresolvableError(f"intrinsic {key} is not supported")

    def _ref(self, stack: str, name: str) -> Any:
        pseudo = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack,
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.templates[stack].get("Parameters", {}):
            default = self.templates[stack]["Parameters"][name].get("Default", name)
            return default if not str(default).startswith("/") else name  # SSM parameter names stay symbolic
        resource = self.resources(stack).get(name)
        if resource is None:
            raise UnresolvableError(f"Ref to unknown {name} in {stack}")
        kind = resource["Type"]
        if kind in _TYPES and _TYPES[kind][2]:
            return self.arn(stack, name)
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{self.name(stack, name)}"
        if kind in ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup"):
            return f"{kind.rsplit('::', 1)[1].lower()}-{name.lower()}"[:40]
        return self.name(stack, name)

    def _get_att(self, stack: str, logical_id: str, attr: str) -> Any:
        resource = self.resources(stack).get(logical_id)
        if resource is None:
            raise UnresolvableError(f"GetAtt of unknown {logical_id} in {stack}")
        if attr == "Arn" or (attr.endswith("Arn") and attr != "RoleArn"):
            return self.arn(stack, logical_id)
        if attr in _ATTR_NAME:
            return self.name(stack, logical_id)
        if attr in ("GroupId", "VpcId", "SubnetId"):
            return self._ref(stack, logical_id)
        if attr == "KeyId":
            return self.name(stack, logical_id)
        return f"{logical_id}.{attr}"

    def _sub(self, stack: str, arg: Any) -> str:
        template, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        values = {k: self.resolve(stack, v) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            ref = match.group(1)
            if ref.startswith("!"):
                return "${" + ref[1:] + "}"
            if ref in values:
                return str(values[ref])
            if "." in ref:
                logical_id, attr = ref.split(".", 1)
                return str(self._get_att(stack, logical_id, attr))
            return str(self._ref(stack, ref))

        return re.sub(r"\$\{([^}]+)\}", replace, template)


def _is_no_value(value: Any) -> bool:
    return isinstance(value, dict) and value == {"Ref": "AWS::NoValue"}
