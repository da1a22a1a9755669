"""The HyperPod and Batch constructs used from a plain CDK app (no blueprint), and the EFA count on each engine."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from mlstack.catalog import efa_interface_count
from mlstack.config.training_engines import LIFECYCLE_SCRIPTS_DIR
from mlstack.constructs.training.batch import BatchMultiNodeTraining
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.hyperpod import HyperPodInstanceGroup, HyperPodSlurmCluster


def _stack() -> tuple[Stack, ec2.Vpc, kms.Key]:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Plain")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    return stack, vpc, kms.Key(stack, "Key")


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "trn1.32xlarge"])
def test_batch_devices_and_interfaces_follow_the_one_efa_count(instance_type: str) -> None:
    stack, vpc, key = _stack()
    subnet = vpc.private_subnets[0]
    efa = EfaNetworking(stack, "Efa", vpc=vpc, subnet=subnet)
    BatchMultiNodeTraining(
        stack,
        "Batch",
        name="t",
        subnet=subnet,
        efa=efa,
        vpc_default_security_group_id=vpc.vpc_default_security_group,
        key=key,
        instance_type=instance_type,
        max_nodes=2,
        image="example.com/train:1",
        image_type="ECS_AL2023" if instance_type.startswith("trn") else "ECS_AL2023_NVIDIA",
    )
    template = Template.from_stack(stack).to_json()
    res = template["Resources"]
    lt = next(r for r in res.values() if r["Type"] == "AWS::EC2::LaunchTemplate")
    job = next(r for r in res.values() if r["Type"] == "AWS::Batch::JobDefinition")
    devices = job["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]["LinuxParameters"]["Devices"]
    count = efa_interface_count(instance_type)
    assert count == {"p5.48xlarge": 32, "p5en.48xlarge": 16, "p4d.24xlarge": 4, "trn1.32xlarge": 8}[instance_type]
    assert len(devices) == count
    nics = lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert len([n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]) == count


def test_batch_capacity_block_has_no_placement_group_and_targets_the_block() -> None:
    stack, vpc, key = _stack()
    subnet = vpc.private_subnets[0]
    efa = EfaNetworking(stack, "Efa", vpc=vpc, subnet=subnet, placement_group=False)
    BatchMultiNodeTraining(
        stack,
        "Batch",
        name="t",
        subnet=subnet,
        efa=efa,
        vpc_default_security_group_id=vpc.vpc_default_security_group,
        key=key,
        instance_type="p5.48xlarge",
        max_nodes=2,
        image="example.com/train:1",
        capacity_reservation_id="cr-0123456789abcdef0",
        capacity_block=True,
    )
    res = Template.from_stack(stack).to_json()["Resources"]
    data = next(r for r in res.values() if r["Type"] == "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": "cr-0123456789abcdef0"}
    ce = next(r for r in res.values() if r["Type"] == "AWS::Batch::ComputeEnvironment")
    assert "PlacementGroup" not in ce["Properties"]["ComputeResources"]
    assert not any(r["Type"] == "AWS::EC2::PlacementGroup" for r in res.values())


def test_batch_rejects_a_placement_group_with_a_reservation() -> None:
    stack, vpc, key = _stack()
    subnet = vpc.private_subnets[0]
    efa = EfaNetworking(stack, "Efa", vpc=vpc, subnet=subnet)
    with pytest.raises(ValueError, match="placement group cannot be combined with a reservation"):
        BatchMultiNodeTraining(
            stack,
            "Batch",
            name="t",
            subnet=subnet,
            efa=efa,
            vpc_default_security_group_id=vpc.vpc_default_security_group,
            key=key,
            instance_type="p5.48xlarge",
            max_nodes=2,
            image="example.com/train:1",
            capacity_reservation_id="cr-0123456789abcdef0",
        )


def _hyperpod(groups: list[HyperPodInstanceGroup]) -> dict[str, Any]:
    stack, vpc, key = _stack()
    efa = EfaNetworking(stack, "Efa", vpc=vpc, subnet=vpc.private_subnets[0], placement_group=False)
    HyperPodSlurmCluster(
        stack,
        "HyperPod",
        cluster_name="plain",
        subnet=vpc.private_subnets[0],
        security_groups=[efa.security_group],
        key=key,
        instance_groups=groups,
        lifecycle_scripts=LIFECYCLE_SCRIPTS_DIR,
    )
    return dict(Template.from_stack(stack).to_json())


def test_hyperpod_from_a_plain_stack() -> None:
    template = _hyperpod(
        [
            HyperPodInstanceGroup(name="controller", instance_type="ml.m7i.xlarge", count=1, role="controller"),
            HyperPodInstanceGroup(
                name="trn1",
                instance_type="ml.trn1.32xlarge",
                count=4,
                efa=True,
                training_plan_arn="arn:aws:sagemaker:us-east-1:123456789012:training-plan/p",
            ),
        ]
    )
    cluster = next(r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster")
    groups = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    assert groups["trn1"]["TrainingPlanArn"].endswith("training-plan/p")
    assert "TrainingPlanArn" not in groups["controller"]


def test_hyperpod_needs_one_controller() -> None:
    with pytest.raises(ValueError, match="need one controller group"):
        _hyperpod([HyperPodInstanceGroup(name="p5", instance_type="ml.p5.48xlarge", count=1)])
