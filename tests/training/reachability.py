"""Security-group reachability read from synthesized templates, as EC2 would evaluate it.

A group is named by (stack, logical id) or, for a VPC's default group, (stack, vpc logical id, "default").
References are followed through `Ref`, `Fn::GetAtt ... GroupId`, `Fn::GetAtt <vpc> DefaultSecurityGroup` and
`Fn::GetStackOutput` (CDK's cross-stack reference) into the stack that owns the group. Rules come from inline
`SecurityGroupIngress`/`SecurityGroupEgress`, standalone `AWS::EC2::SecurityGroupIngress`/`Egress`, EC2's implicit
allow-all egress of a group created without egress rules, and a default group's initial rules (all traffic from
itself, all traffic out), which CDK's `Custom::VpcRestrictDefaultSG` revokes.

Traffic from A to B on (protocol, port) is allowed when an egress rule of one of A's groups names one of B's
groups (or a CIDR holding B's address) and an ingress rule of one of B's groups names one of A's groups. Security
groups are stateful, so replies need no rule. Network ACLs are not modelled (mlstack uses the default ones).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Group = tuple[str, ...]
Templates = Mapping[str, Mapping[str, Any]]
"""Stack name (CloudFormation) -> template."""


@dataclass(frozen=True)
class Rule:
    protocol: str
    from_port: int
    to_port: int
    peer_group: Group | None = None
    cidr: str | None = None

    def matches(self, protocol: str, port: int) -> bool:
        if self.protocol == "-1":
            return True
        return self.protocol == protocol and self.from_port <= port <= self.to_port


@dataclass
class Rules:
    ingress: dict[Group, list[Rule]] = field(default_factory=dict)
    egress: dict[Group, list[Rule]] = field(default_factory=dict)


class Network:
    """The groups and rules of a set of stacks (one blueprint's templates)."""

    def __init__(self, templates: Templates) -> None:
        self.templates = templates
        self.rules = Rules()
        self._collect()

    # ------------------------------------------------------------------------------------------------ references
    def group(self, stack: str, value: Any) -> Group:
        """The group a property value names, followed across stacks."""
        stack, value = self.follow(stack, value)
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            logical, attribute = value["Fn::GetAtt"]
            if attribute == "DefaultSecurityGroup":
                return (stack, logical, "default")
            return (stack, logical)
        if isinstance(value, dict) and "Ref" in value:
            return (stack, value["Ref"])
        raise ValueError(f"not a security group reference in {stack}: {value!r}")

    def follow(self, stack: str, value: Any) -> tuple[str, Any]:
        """Resolve `Fn::GetStackOutput` (repeatedly) to the producing stack and its output's value."""
        while isinstance(value, dict) and "Fn::GetStackOutput" in value:
            ref = value["Fn::GetStackOutput"]
            stack = ref["StackName"]
            value = self.templates[stack]["Outputs"][ref["OutputName"]]["Value"]
        return stack, value

    def resource(self, stack: str, value: Any) -> tuple[str, str, dict[str, Any]]:
        """The resource a `Ref`/`Fn::GetAtt` value names: (stack, logical id, resource)."""
        stack, value = self.follow(stack, value)
        logical = value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]
        return stack, logical, self.templates[stack]["Resources"][logical]

    # ------------------------------------------------------------------------------------------------ rules
    def _rule(self, stack: str, props: Mapping[str, Any], peer_key: str, cidr_key: str) -> Rule:
        peer = self.group(stack, props[peer_key]) if peer_key in props else None
        protocol = str(props.get("IpProtocol", "-1"))
        return Rule(protocol, int(props.get("FromPort", 0)), int(props.get("ToPort", 65535)), peer, props.get(cidr_key))

    def _collect(self) -> None:
        restricted: set[Group] = set()
        for stack, template in self.templates.items():
            for logical, res in template.get("Resources", {}).items():
                kind, props = res["Type"], res.get("Properties", {})
                if kind == "AWS::EC2::VPC":
                    default = (stack, logical, "default")
                    self.rules.ingress.setdefault(default, []).append(Rule("-1", 0, 65535, peer_group=default))
                    self.rules.egress.setdefault(default, []).append(Rule("-1", 0, 65535, cidr="0.0.0.0/0"))
                elif kind == "Custom::VpcRestrictDefaultSG":
                    restricted.add(self.group(stack, props["DefaultSecurityGroupId"]))
        for group in restricted:  # the custom resource revokes exactly the two initial rules
            self.rules.ingress[group] = [r for r in self.rules.ingress[group] if r.peer_group != group]
            self.rules.egress[group] = [r for r in self.rules.egress[group] if r.cidr != "0.0.0.0/0"]
        for stack, template in self.templates.items():
            for logical, res in template.get("Resources", {}).items():
                kind, props = res["Type"], res.get("Properties", {})
                if kind == "AWS::EC2::SecurityGroup":
                    group = (stack, logical)
                    ingress = [
                        self._rule(stack, r, "SourceSecurityGroupId", "CidrIp")
                        for r in props.get("SecurityGroupIngress", [])
                    ]
                    egress = [
                        self._rule(stack, r, "DestinationSecurityGroupId", "CidrIp")
                        for r in props.get("SecurityGroupEgress", [])
                    ]
                    if "SecurityGroupEgress" not in props:  # EC2 adds allow-all egress to a new group
                        egress.append(Rule("-1", 0, 65535, cidr="0.0.0.0/0"))
                    self.rules.ingress.setdefault(group, []).extend(ingress)
                    self.rules.egress.setdefault(group, []).extend(egress)
                elif kind == "AWS::EC2::SecurityGroupIngress":
                    target = self.group(stack, props["GroupId"])
                    rule = self._rule(stack, props, "SourceSecurityGroupId", "CidrIp")
                    self.rules.ingress.setdefault(target, []).append(rule)
                elif kind == "AWS::EC2::SecurityGroupEgress":
                    target = self.group(stack, props["GroupId"])
                    rule = self._rule(stack, props, "DestinationSecurityGroupId", "CidrIp")
                    self.rules.egress.setdefault(target, []).append(rule)

    # ------------------------------------------------------------------------------------------------ questions
    def allows(
        self, source: Iterable[Group], destination: Iterable[Group], protocol: str, port: int, address: str = ""
    ) -> bool:
        """Group-to-group traffic (both sides' rules), e.g. container to container on the rendezvous port."""
        src, dst = set(source), set(destination)
        out = any(
            r.matches(protocol, port) and (r.peer_group in dst or _holds(r.cidr, address))
            for g in src
            for r in self.rules.egress.get(g, [])
        )
        into = any(
            r.matches(protocol, port) and (r.peer_group in src or _holds(r.cidr, address))
            for g in dst
            for r in self.rules.ingress.get(g, [])
        )
        return out and into

    def allows_out(self, source: Iterable[Group], protocol: str, port: int, address: str) -> bool:
        """Traffic from the groups to an address outside them (the internet, an endpoint's address)."""
        return any(
            r.matches(protocol, port) and _holds(r.cidr, address)
            for g in set(source)
            for r in self.rules.egress.get(g, [])
        )


def _holds(cidr: str | None, address: str) -> bool:
    if not cidr or not address:
        return False
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)


def batch_container_groups(net: Network, stack: str) -> list[Group]:
    """The groups AWS Batch gives every multi-node container's interface (awsvpc): the compute environment's
    `SecurityGroupIds`, or the default group of the VPC of its subnet when it names none (AWS Batch User Guide,
    "Compute environment considerations for MNP")."""
    (ce,) = [r for r in net.templates[stack]["Resources"].values() if r["Type"] == "AWS::Batch::ComputeEnvironment"]
    resources = ce["Properties"]["ComputeResources"]
    if resources.get("SecurityGroupIds"):
        return [net.group(stack, g) for g in resources["SecurityGroupIds"]]
    subnet_stack, _, subnet = net.resource(stack, resources["Subnets"][0])
    vpc_stack, vpc, _ = net.resource(subnet_stack, subnet["Properties"]["VpcId"])
    return [(vpc_stack, vpc, "default")]


def batch_host_groups(net: Network, stack: str) -> list[Group]:
    """The groups of the instance's primary interface (launch template, network card 0, device 0)."""
    (lt,) = [r for r in net.templates[stack]["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    nics = lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    primary = next(n for n in nics if n.get("NetworkCardIndex", 0) == 0 and n.get("DeviceIndex", 0) == 0)
    return [net.group(stack, g) for g in primary["Groups"]]
