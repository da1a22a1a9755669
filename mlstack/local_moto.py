"""A moto server for `make deploy-local`, extended so the real `cdk deploy` of a blueprint runs to the end.

    python -m mlstack.local_moto PORT      # serves http://localhost:PORT until SIGTERM/SIGINT

moto's CloudFormation is a model, not AWS. The extensions below (applied in this process only) fill the gaps
a CDK app of this project meets; each is reported by the deploy driver as "not modelled":
- `Fn::GetStackOutput` (CloudFormation's cross-stack reference without an export, which CDK emits for
  `@aws-cdk/core:defaultCrossStackReferences: weak`) is resolved from the other stack's outputs.
- `UpdateTerminationProtection` (the CLI calls it for stacks with termination protection) is accepted.
- Resource types moto cannot create (EKS, FSx, placement groups, auto scaling, alarms, function URLs...) and
  custom resources (moto would run their Lambda in Docker) become placeholders: the stack completes, `Ref`
  gives the placeholder's name and `Fn::GetAtt` a `<name>.<attribute>` string (an ARN-shaped string for
  `...Arn` attributes, which IAM policies check). Nothing behind them exists.
- SageMaker accepts every `ml.*` instance type (moto lists only older families).
- A type moto cannot update in place (a KMS key, for one) keeps its old properties; moto 5.2.5 would drop it
  from the stack instead, and the next `Fn::GetAtt` on it fails ("references undefined resource").
- KMS keys: moto 5.2.5's CloudFormation handler raises on CloudFormation-style tags (Key/Value); they are
  translated to the API's TagKey/TagValue, and a key policy object to its JSON text.
- SSM parameters without a Name (CDK writes some) get the generated name CloudFormation would give them;
  moto 5.2.5 raises AttributeError on them.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

from moto.cloudformation import parsing
from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.responses import CloudFormationResponse
from moto.core.common_models import CloudFormationModel
from moto.core.responses import ActionResult
from moto.kms import models as kms_models
from moto.sagemaker import models as sagemaker_models
from moto.server import ThreadedMotoServer
from moto.ssm import models as ssm_models

_original_clean_json = parsing.clean_json
_original_class_from_type = parsing.resource_class_from_type
_original_update_resource = parsing.parse_and_update_resource


def modelled(resource_type: str) -> bool:
    """True when moto's CloudFormation creates this type for real (in moto's in-memory services)."""
    return not resource_type.startswith("Custom::") and resource_type in parsing.get_model_map()


class Placeholder(CloudFormationModel):
    """Stands in for a resource moto cannot create."""

    __module__ = "mlstack.local_moto"  # moto files models under the second part of their module (also as __main__)

    def __init__(self, name: str, resource_type: str, account_id: str = "", region_name: str = "") -> None:
        self.name = name
        self.resource_type = resource_type
        self.account_id = account_id
        self.region_name = region_name

    @property
    def physical_resource_id(self) -> str:
        return self.name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudFormation::Placeholder"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return True

    def get_cfn_attribute(self, attribute_name: str) -> str:
        if attribute_name.endswith("Arn"):  # policies referencing it must still hold an ARN
            _, service, kind = [*self.resource_type.lower().split("::"), "", ""][:3]
            return f"arn:aws:{service}:{self.region_name}:{self.account_id}:{kind}/{self.name}"
        return f"{self.name}.{attribute_name}"

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> Placeholder:
        return cls(resource_name, str(kwargs.get("ResourceType", "?")), account_id, region_name)

    @classmethod
    def update_from_cloudformation_json(
        cls,
        original_resource: Any,
        new_resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
    ) -> Any:
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        return None


def _resource_class_from_type(resource_type: str) -> Any:
    if resource_type in parsing.NULL_MODELS or resource_type == "AWS::CDK::Metadata":
        return _original_class_from_type(resource_type)
    return _original_class_from_type(resource_type) if modelled(resource_type) else Placeholder


def _clean_json(resource_json: Any, resources_map: Any) -> Any:
    if isinstance(resource_json, dict) and "Fn::GetStackOutput" in resource_json:
        ref = resource_json["Fn::GetStackOutput"]
        from moto.cloudformation.models import cloudformation_backends

        region = ref.get("Region") or resources_map._region_name
        backend = cloudformation_backends[resources_map._account_id][region]
        for stack in backend.stacks.values():
            if stack.name == ref["StackName"] and stack.status != "DELETE_COMPLETE":
                outputs = {o.key: o.value for o in stack.output_map.values()}
                if ref["OutputName"] in outputs:
                    return outputs[ref["OutputName"]]
        raise ValidationError(message=f"No output {ref['OutputName']} in stack {ref['StackName']}")
    return _original_clean_json(resource_json, resources_map)


def _parse_and_update_resource(
    logical_id: str, resource_json: Any, resources_map: Any, account_id: str, region_name: str
) -> Any:
    updated = _original_update_resource(logical_id, resource_json, resources_map, account_id, region_name)
    if updated is None:  # moto cannot update this type in place: keep it as it was instead of losing it
        print(f"moto kept {logical_id} ({resource_json.get('Type')}) unchanged: no update support", flush=True)
        return resources_map[logical_id]
    return updated


def _update_termination_protection(self: CloudFormationResponse) -> ActionResult:
    stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
    stack.enable_termination_protection = self._get_param("EnableTerminationProtection") in (True, "true")
    return ActionResult({"StackId": stack.stack_id})


def _kms_key_from_cloudformation(original: Any) -> Any:
    def create(cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any) -> Any:
        properties = cloudformation_json["Properties"]
        # moto's KMS handler expects the API's TagKey/TagValue and raises KeyError on CloudFormation's Key/Value;
        # it also keeps a KeyPolicy object where its API expects the JSON text.
        properties["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in properties.get("Tags", [])]
        if isinstance(properties.get("KeyPolicy"), dict):
            properties["KeyPolicy"] = json.dumps(properties["KeyPolicy"])
        return original.__func__(cls, resource_name, cloudformation_json, *args, **kwargs)

    return classmethod(create)


def _ssm_parameter_from_cloudformation(original: Any) -> Any:
    def create(cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any) -> Any:
        # CloudFormation names a parameter without Name itself; moto 5.2.5 raises AttributeError on None.
        cloudformation_json["Properties"].setdefault("Name", resource_name)
        return original.__func__(cls, resource_name, cloudformation_json, *args, **kwargs)

    return classmethod(create)


def extend_moto() -> None:
    parsing.resource_class_from_type = _resource_class_from_type
    parsing.clean_json = _clean_json
    parsing.parse_and_update_resource = _parse_and_update_resource
    CloudFormationResponse.update_termination_protection = _update_termination_protection  # type: ignore[attr-defined]
    sagemaker_models.FakeEndpointConfig.validate_instance_type = lambda self, instance_type: None  # type: ignore[method-assign]
    ssm_models.Parameter.create_from_cloudformation_json = _ssm_parameter_from_cloudformation(  # type: ignore[method-assign]
        ssm_models.Parameter.create_from_cloudformation_json
    )
    kms_models.Key.create_from_cloudformation_json = _kms_key_from_cloudformation(  # type: ignore[method-assign]
        kms_models.Key.create_from_cloudformation_json
    )


def main(argv: list[str]) -> int:
    port = int(argv[0])
    extend_moto()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"moto listening on http://localhost:{port}", flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
