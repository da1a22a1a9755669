"""Reading synthesized CloudFormation templates: references (also across stacks), text and JSON in properties."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

Key = tuple[str, str]
"""(stack name, logical ID): one resource anywhere in the app."""

_HASH = re.compile(r"[0-9A-F]{8}$")


def short_name(logical_id: str) -> str:
    """`P5NodesNodegroupEA5107DF` -> `P5NodesNodegroup` (CDK's hash suffix says nothing to a reader)."""
    return _HASH.sub("", logical_id) or logical_id


class App:
    """The templates of one blueprint (stack name -> template), with references resolved across stacks."""

    def __init__(self, stacks: dict[str, dict[str, Any]]) -> None:
        self.stacks = stacks
        self.resources: dict[Key, dict[str, Any]] = {
            (stack, logical): resource
            for stack, template in sorted(stacks.items())
            for logical, resource in sorted(template.get("Resources", {}).items())
        }
        self.exports: dict[str, Key] = {}
        for stack, template in sorted(stacks.items()):
            for output in template.get("Outputs", {}).values():
                name = output.get("Export", {}).get("Name")
                targets = self.refs(stack, output.get("Value"))
                if isinstance(name, str) and len(targets) == 1:
                    self.exports[name] = targets[0]
        self.referrers: dict[Key, list[Key]] = {}
        for key, resource in self.resources.items():
            for target in self.refs(key[0], resource.get("Properties", {})):
                self.referrers.setdefault(target, []).append(key)
        self.providers = self._provider_functions()

    def refs(self, stack: str, value: Any) -> list[Key]:
        """Resources that `value` (a property value of a resource in `stack`) refers to, in order, no repeats."""
        found: list[Key] = []
        for kind, arg in _intrinsics(value):
            if kind == "Ref" and isinstance(arg, str):
                found.append((stack, arg))
            elif kind == "Fn::GetAtt":
                found.append((stack, str(arg[0] if isinstance(arg, list) else str(arg).split(".")[0])))
            elif kind == "Fn::Sub":
                text = arg[0] if isinstance(arg, list) else arg
                found += [(stack, m.split(".")[0]) for m in re.findall(r"\$\{([^}!]+)\}", str(text))]
            elif kind == "Fn::GetStackOutput" and isinstance(arg, dict):
                other = str(arg.get("StackName"))
                output = self.stacks.get(other, {}).get("Outputs", {}).get(arg.get("OutputName"))
                if output is not None:
                    found += self.refs(other, output.get("Value"))
            elif kind == "Fn::ImportValue" and isinstance(arg, str) and arg in getattr(self, "exports", {}):
                found.append(self.exports[arg])
        return list(dict.fromkeys(k for k in found if k in self.resources))

    def of_type(self, *types: str) -> Iterator[tuple[Key, dict[str, Any]]]:
        return ((k, r) for k, r in self.resources.items() if r.get("Type") in types)

    def _provider_functions(self) -> set[Key]:
        """Lambda functions that only serve custom resources (their ServiceToken), and what those call (through CDK's
        Provider waiter, a state machine, which belongs to them too)."""
        # A function that an EventBridge rule also invokes does more than serve a custom resource: it stays drawn.
        found: set[Key] = {
            t for key, _ in self.of_type("AWS::Events::Rule") for t in self.refs(key[0], self.resources[key])
        }
        rule_targets = set(found)
        todo = [
            t
            for key, r in self.resources.items()
            for t in self.refs(key[0], r.get("Properties", {}).get("ServiceToken"))
            if str(r.get("Type", "")).startswith(("Custom::", "AWS::CloudFormation::CustomResource"))
        ]
        while todo:
            key = todo.pop()
            if key in found or self.resources[key].get("Type") not in PROVIDER_TYPES:
                continue
            found.add(key)
            todo += self.refs(key[0], self.resources[key].get("Properties", {}))
        return found - rule_targets


PROVIDER_TYPES = ("AWS::Lambda::Function", "AWS::StepFunctions::StateMachine")


def _intrinsics(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        if len(value) == 1:
            ((name, arg),) = value.items()
            if name == "Ref" or name.startswith("Fn::"):
                yield name, arg
        for item in value.values():
            yield from _intrinsics(item)
    elif isinstance(value, list):
        for item in value:
            yield from _intrinsics(item)


def text_of(value: Any) -> str | None:
    """A property as plain text: scalars as they are, `Fn::Join` with each reference shown as `*`."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(text_of(p) or "*" for p in parts)
    return None


def json_of(value: Any) -> Any:
    """A JSON document held in a property (a string, or an `Fn::Join` that builds one), or None."""
    text = text_of(value)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        try:  # a reference in value position: "x":* -> "x":0
            return json.loads(re.sub(r"(?<=[:\[,])\*", "0", text))
        except ValueError:
            return None
