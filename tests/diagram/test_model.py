"""The diagram model over small hand-written templates: labels, placement, paths, determinism."""

from __future__ import annotations

import json
from typing import Any

from mlstack.diagram.dot import render
from mlstack.diagram.model import Graph, build

NET = "bp-NetworkStack"
APP = "bp-AppStack"


def _network() -> dict[str, Any]:
    subnet = {"Ref": "Subnet1"}
    return {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
            "Subnet1": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {
                    "VpcId": {"Ref": "Vpc"},
                    "AvailabilityZoneId": "use1-az4",
                    "CidrBlock": "10.0.64.0/18",
                    "Tags": [{"Key": "aws-cdk:subnet-name", "Value": "Private"}],
                },
            },
            "Subnet2": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {
                    "VpcId": {"Ref": "Vpc"},
                    "AvailabilityZoneId": "use1-az6",
                    "CidrBlock": "10.0.128.0/18",
                    "Tags": [{"Key": "aws-cdk:subnet-name", "Value": "Private"}],
                },
            },
            "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        },
        "Outputs": {"Subnet1Out": {"Value": subnet}, "Subnet2Out": {"Value": {"Ref": "Subnet2"}}},
    }


def _from_network(output: str) -> dict[str, Any]:
    return {"Fn::GetStackOutput": {"StackName": NET, "OutputName": output, "Region": "us-east-1"}}


def _app() -> dict[str, Any]:
    steps = [
        {"Name": "Prep", "Type": "Processing", "Arguments": {}},
        {
            "Name": "Train",
            "Type": "Training",
            "Arguments": {
                "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
                "InputDataConfig": {"Get": "Steps.Prep.ProcessingOutputConfig"},
            },
        },
    ]
    # The definition is built with an Fn::Join around a role reference, as CDK writes it.
    before, after = json.dumps({"Steps": steps, "RoleArn": "ROLE"}).split("ROLE")
    nics = [{"NetworkCardIndex": i, "InterfaceType": "efa" if i == 0 else "efa-only"} for i in range(4)]
    return {
        "Resources": {
            "Placement1A2B3C4D": {"Type": "AWS::EC2::PlacementGroup", "Properties": {"Strategy": "cluster"}},
            "NodesTemplate": {
                "Type": "AWS::EC2::LaunchTemplate",
                "Properties": {
                    "LaunchTemplateData": {
                        "InstanceType": "p4d.24xlarge",
                        "NetworkInterfaces": [{**n, "Groups": [{"Ref": "NodeSg"}]} for n in nics],
                        "Placement": {"GroupName": {"Ref": "Placement1A2B3C4D"}},
                    }
                },
            },
            "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Version": "1.35"}},
            "Nodes": {
                "Type": "AWS::EKS::Nodegroup",
                "Properties": {
                    "ClusterName": {"Ref": "Cluster"},
                    "LaunchTemplate": {"Id": {"Ref": "NodesTemplate"}},
                    "Labels": {"mlstack.io/node-group": "gpu", "mlstack.io/network-gbps": "400"},
                    "ScalingConfig": {"DesiredSize": 2, "MinSize": 0, "MaxSize": 4},
                    "Subnets": [_from_network("Subnet1Out")],
                },
            },
            "NodeSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {}},
            "FsxSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {}},
            "FsxFromNodes": {
                "Type": "AWS::EC2::SecurityGroupIngress",
                "Properties": {
                    "GroupId": {"Ref": "FsxSg"},
                    "SourceSecurityGroupId": {"Ref": "NodeSg"},
                    "IpProtocol": "tcp",
                    "FromPort": 988,
                    "ToPort": 988,
                },
            },
            "Fsx": {
                "Type": "AWS::FSx::FileSystem",
                "Properties": {
                    "FileSystemType": "LUSTRE",
                    "StorageCapacity": 1200,
                    "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
                    "SecurityGroupIds": [{"Ref": "FsxSg"}],
                    "SubnetIds": [_from_network("Subnet1Out")],
                },
            },
            "Model": {"Type": "AWS::SageMaker::Model", "Properties": {"Containers": []}},
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {
                            "VariantName": "A",
                            "InstanceType": "ml.g5.2xlarge",
                            "InitialInstanceCount": 2,
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "InitialVariantWeight": 0.9,
                        },
                        {
                            "VariantName": "B",
                            "InstanceType": "ml.g6.2xlarge",
                            "InitialInstanceCount": 1,
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "InitialVariantWeight": 0.1,
                        },
                    ]
                },
            },
            "Endpoint": {
                "Type": "AWS::SageMaker::Endpoint",
                "Properties": {"EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]}},
            },
            "Pipeline": {
                "Type": "AWS::SageMaker::Pipeline",
                "Properties": {
                    "PipelineName": "train",
                    "PipelineDefinition": {
                        "PipelineDefinitionBody": {"Fn::Join": ["", [before, {"Ref": "Role"}, after]]}
                    },
                },
            },
            "Queue": {"Type": "AWS::Batch::JobQueue", "Properties": {"Priority": 10}},
        }
    }


def _graph() -> Graph:
    return build("bp", {NET: _network(), APP: _app()}, "a test blueprint")


def test_node_group_reads_its_launch_template_and_draws_the_efa_group() -> None:
    graph = _graph()
    nodes = graph.nodes["AppStack__Nodes"]
    assert nodes.lines[:5] == [
        "node group gpu",
        "p4d.24xlarge",
        "2 nodes (0-4)",
        "on-demand",
        "EFA: 4 interfaces per node",
    ]
    assert "cluster placement group" in nodes.lines
    assert ("AppStack__Nodes", "AppStack__Nodes", "EFA 400 Gbps") in graph.edges
    assert ("AppStack__Nodes", "AppStack__Cluster", "") in graph.edges
    # The launch template and placement group are part of the node group, not nodes of their own.
    assert not any("Template" in n or "Placement" in n for n in graph.nodes)


def test_cross_stack_subnet_reference_places_nodes_in_that_subnet() -> None:
    graph = _graph()
    assert graph.nodes["AppStack__Nodes"].place == "NetworkStack__Subnet1"
    assert graph.nodes["AppStack__Fsx"].place == "NetworkStack__Subnet1"
    assert graph.subnets["NetworkStack__Subnet1"].zone == "use1-az4"
    assert graph.subnets["NetworkStack__Subnet1"].parent == "NetworkStack__Vpc"
    assert graph.vpcs["NetworkStack__Vpc"].lines == ["VPC 10.0.0.0/16"]


def test_security_group_rule_is_a_traffic_path_with_its_port() -> None:
    assert ("AppStack__Nodes", "AppStack__Fsx", "tcp 988") in _graph().edges


def test_endpoint_variants_carry_instance_type_count_and_weight_and_lead_to_the_model() -> None:
    graph = _graph()
    a, b = graph.nodes["AppStack__Endpoint__v0"], graph.nodes["AppStack__Endpoint__v1"]
    assert a.lines == ["variant A", "ml.g5.2xlarge x 2", "weight 0.9"]
    assert b.lines == ["variant B", "ml.g6.2xlarge x 1", "weight 0.1"]
    assert ("AppStack__Endpoint__v0", "AppStack__Model", "") in graph.edges
    assert ("AppStack__Endpoint", "AppStack__Model", "") not in graph.edges  # drawn through the variants
    assert "AppStack__Config" not in graph.nodes


def test_pipeline_steps_follow_their_data_dependencies() -> None:
    graph = _graph()
    assert graph.nodes["AppStack__Pipeline__Train"].lines == ["Train", "Training", "ml.p5.48xlarge x 2"]
    assert ("AppStack__Pipeline__Prep", "AppStack__Pipeline__Train", "") in graph.edges
    assert ("AppStack__Pipeline", "AppStack__Pipeline__Prep", "") in graph.edges


def test_unknown_type_is_drawn_generically_and_plumbing_is_left_out() -> None:
    graph = _graph()
    assert graph.nodes["AppStack__Queue"].lines == ["JobQueue Queue", "Batch", "Priority: 10"]
    assert not any("Role" in n or "Sg" in n or "FsxFromNodes" in n for n in graph.nodes)


def test_rendering_is_deterministic_whatever_the_template_order() -> None:
    app = _app()
    shuffled = {"Resources": dict(reversed(list(app["Resources"].items())))}
    first = render(_graph())
    assert render(build("bp", {APP: shuffled, NET: _network()}, "a test blueprint")) == first
    assert first.startswith('digraph "bp: a test blueprint" {')
