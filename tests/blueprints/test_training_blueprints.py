"""Every training blueprint, from the one session synth: EFA wiring, placement, encryption, FSx, node groups, EKS."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from mlstack.catalog import Accelerator, efa_layout, get_instance
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.constructs.training import versions
from mlstack.k8s.job import LEGACY_ENV, render_job
from tests.conftest import selected_blueprints
from tests.synth import Session

CLOUDWATCH = "amazon-cloudwatch-observability"
TRAINING = [
    n
    for n in selected_blueprints()
    if (t := load(BLUEPRINTS_DIR / f"{n}.yaml").training) is not None
    and t.engine == "eks"
    # Node-group blueprints; Karpenter pools are checked in test_karpenter_blueprints.py
    and t.capacity_manager == "node_groups"
]
EXPECTED_EFA = {"p5.48xlarge": 32, "p4d.24xlarge": 4, "trn1.32xlarge": 8}
"""MaximumEfaInterfaces of EC2 DescribeInstanceTypes (moto 5.2.5 capture); every other type is checked against the
catalog."""


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _one(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    found = _resources(template, kind)
    assert len(found) == 1, f"{kind}: {sorted(found)}"
    return next(iter(found.items()))


def _network_value(session: Session, name: str, ref: Any) -> Any:
    """Follow a cross-stack reference (Fn::GetStackOutput) to the value in NetworkStack's template."""
    assert isinstance(ref, dict) and "Fn::GetStackOutput" in ref, ref
    out = ref["Fn::GetStackOutput"]
    network = session.blueprints[name].templates["NetworkStack"]
    assert out["StackName"] == f"{name}-NetworkStack"
    return network["Outputs"][out["OutputName"]]["Value"]


def _subnet_zone(session: Session, name: str, ref: Any) -> str:
    value = _network_value(session, name, ref)
    props = session.blueprints[name].templates["NetworkStack"]["Resources"][value["Ref"]]["Properties"]
    assert any(t["Value"] == "Private" for t in props["Tags"] if t["Key"] == "aws-cdk:subnet-type")
    return str(props.get("AvailabilityZoneId") or props["AvailabilityZone"])


@pytest.fixture(params=TRAINING)
def bp(request: pytest.FixtureRequest, session: Session) -> tuple[str, Any, dict[str, Any]]:
    name = request.param
    config = session.blueprints[name].config
    return name, config, session.blueprints[name].templates["TrainingClusterStack"]


def _efa_group(config: Any) -> Any:
    return config.training.efa_groups[0]


def _accelerator(instance_type: str) -> Accelerator:
    accelerator = get_instance(instance_type).accelerator
    assert accelerator is not None
    return accelerator


def _launch_template(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    # The node group's; the admin host's (IMDSv2 only) is checked in tests/training/test_day_one_and_two.py.
    lts = {k: v for k, v in _resources(template, "AWS::EC2::LaunchTemplate").items() if not k.startswith("AdminHost")}
    assert len(lts) == 1
    logical_id, lt = next(iter(lts.items()))
    return logical_id, lt["Properties"]["LaunchTemplateData"]


def test_training_blueprints_are_shipped() -> None:
    if selected_blueprints() == sorted(p.stem for p in BLUEPRINTS_DIR.glob("*.yaml")):
        assert {"eks-gpu-training", "eks-p4d-training", "eks-trn1-training", "eks-g6e-training"} <= set(TRAINING)


def test_launch_template_has_exactly_the_catalogs_efa_interfaces(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    group = _efa_group(config)
    _, data = _launch_template(template)
    nics = data["NetworkInterfaces"]
    it = get_instance(group.instance_type)
    efa = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
    assert len(efa) == it.max_efa_interfaces == EXPECTED_EFA.get(it.name, it.max_efa_interfaces)
    assert sorted(n["NetworkCardIndex"] for n in efa) == list(it.efa_card_indexes)
    expected = [(i.network_card_index, i.device_index, i.interface_type) for i in efa_layout(it.name)]
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == expected
    assert all(n["DeleteOnTermination"] is True for n in nics)


def test_no_public_ip_and_every_interface_has_the_efa_group(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    _, data = _launch_template(template)
    efa_groups = {
        k
        for k, r in _resources(template, "AWS::EC2::SecurityGroup").items()
        if "EFA" in r["Properties"]["GroupDescription"]
    }
    assert len(efa_groups) == 1
    (efa_sg,) = efa_groups
    for nic in data["NetworkInterfaces"]:
        assert "AssociatePublicIpAddress" not in nic
        assert "SubnetId" not in nic  # the node group chooses the subnet
        assert {"Fn::GetAtt": [efa_sg, "GroupId"]} in nic["Groups"]
        assert {"Fn::GetAtt": ["TrainingCluster4FD58CEB", "ClusterSecurityGroupId"]} in nic["Groups"]
    assert "SecurityGroupIds" not in data


def test_efa_security_group_references_itself_in_both_directions(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    (efa_sg,) = [
        k
        for k, r in _resources(template, "AWS::EC2::SecurityGroup").items()
        if "EFA" in r["Properties"]["GroupDescription"]
    ]
    ref = {"Fn::GetAtt": [efa_sg, "GroupId"]}
    ingress = [
        r["Properties"]
        for r in _resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == ref and r["Properties"].get("SourceSecurityGroupId") == ref
    ]
    egress = [
        r["Properties"]
        for r in _resources(template, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == ref and r["Properties"].get("DestinationSecurityGroupId") == ref
    ]
    assert [p["IpProtocol"] for p in ingress] == ["-1"]
    assert [p["IpProtocol"] for p in egress] == ["-1"]
    # No other egress: the group is for EFA peers (and Lustre) only.
    props = template["Resources"][efa_sg]["Properties"]
    assert not any(rule.get("CidrIp") == "0.0.0.0/0" for rule in props.get("SecurityGroupEgress", []))


def test_one_subnet_in_the_training_az(bp: tuple[str, Any, dict[str, Any]], session: Session) -> None:
    name, config, template = bp
    group = _efa_group(config)
    nodegroups = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::Nodegroup").values()
        if "LaunchTemplate" in r["Properties"]
    ]
    assert len(nodegroups) == 1
    (subnet,) = nodegroups[0]["Subnets"]
    assert _subnet_zone(session, name, subnet) == config.training.zone_of(group, config.zones)


def test_node_group_uses_the_launch_template_ami_type_and_cost_safe_size(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    group = _efa_group(config)
    lt_id, data = _launch_template(template)
    (props,) = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::Nodegroup").values()
        if "LaunchTemplate" in r["Properties"]
    ]
    assert props["LaunchTemplate"] == {
        "Id": {"Ref": lt_id},
        "Version": {"Fn::GetAtt": [lt_id, "LatestVersionNumber"]},
    }
    assert "InstanceTypes" not in props and data["InstanceType"] == group.instance_type
    kind = _accelerator(group.instance_type).kind
    assert props["AmiType"] == {"gpu": "AL2023_x86_64_NVIDIA", "trainium": "AL2023_x86_64_NEURON"}[kind]
    assert props["ScalingConfig"]["DesiredSize"] == 0 == group.desired_size
    taints = {t["Key"] for t in props["Taints"]}
    assert taints == {"nvidia.com/gpu" if kind == "gpu" else "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"}
    assert props["Labels"]["mlstack.io/efa-interfaces"] == str(get_instance(group.instance_type).max_efa_interfaces)


def test_placement_group_is_cluster_unless_a_reservation_fixes_placement(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    group = _efa_group(config)
    _, data = _launch_template(template)
    groups = _resources(template, "AWS::EC2::PlacementGroup")
    if group.capacity.is_reservation:
        assert groups == {} and "Placement" not in data
        target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
        assert target == {"CapacityReservationId": group.capacity.reservation_id}
    else:
        ((pg_id, pg),) = groups.items()
        assert pg["Properties"]["Strategy"] == "cluster"
        assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [pg_id, "GroupName"]}}
        assert "CapacityReservationSpecification" not in data


def test_imdsv2_and_root_volume_encrypted_with_the_project_key(
    bp: tuple[str, Any, dict[str, Any]], session: Session
) -> None:
    name, _, template = bp
    _, data = _launch_template(template)
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2  # pods off the host network (FSx CSI) reach IMDS
    (root,) = data["BlockDeviceMappings"]
    ebs = root["Ebs"]
    assert ebs["Encrypted"] is True and ebs["VolumeType"] == "gp3"
    assert _network_value(session, name, ebs["KmsKeyId"]) == {"Fn::GetAtt": ["ProjectKeyFDD03260", "Arn"]}


def test_local_nvme_is_raided_for_containers(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    _, data = _launch_template(template)
    if get_instance(_efa_group(config).instance_type).has_local_nvme:
        user_data = data["UserData"]["Fn::Base64"]
        assert "Content-Type: application/node.eks.aws" in user_data and "strategy: RAID0" in user_data
    else:
        assert "UserData" not in data


def test_fsx_is_retained_encrypted_and_in_the_training_az_subnet(
    bp: tuple[str, Any, dict[str, Any]], session: Session
) -> None:
    name, config, template = bp
    _, fsx = _one(template, "AWS::FSx::FileSystem")
    assert (fsx["DeletionPolicy"], fsx["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
    props = fsx["Properties"]
    (fsx_sg,) = [g["Fn::GetAtt"][0] for g in props["SecurityGroupIds"]]
    assert (
        template["Resources"][fsx_sg]["DeletionPolicy"] == "RetainExceptOnCreate"
    )  # still used by the retained file system
    (subnet,) = props["SubnetIds"]
    assert _subnet_zone(session, name, subnet) == config.training.zone_of(_efa_group(config), config.zones)
    assert _network_value(session, name, props["KmsKeyId"]) == {"Fn::GetAtt": ["ProjectKeyFDD03260", "Arn"]}
    lustre = props["LustreConfiguration"]
    assert lustre["DeploymentType"] == config.training.fsx.deployment_type == "PERSISTENT_2"
    assert lustre["MetadataConfiguration"] == {"Mode": "AUTOMATIC"} and lustre["DataCompressionType"] == "LZ4"
    assert props["FileSystemTypeVersion"] == "2.15"


def test_fsx_admits_lustre_ports_from_the_training_nodes(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    _, fsx = _one(template, "AWS::FSx::FileSystem")
    (fsx_sg,) = [g["Fn::GetAtt"][0] for g in fsx["Properties"]["SecurityGroupIds"]]
    ports = {
        (r["Properties"]["FromPort"], r["Properties"]["ToPort"])
        for r in _resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [fsx_sg, "GroupId"]}
    }
    assert ports == {(988, 988), (1018, 1023)}


def test_eks_cluster_is_private_logged_and_encrypted(bp: tuple[str, Any, dict[str, Any]], session: Session) -> None:
    name, _, template = bp
    _, cluster = _one(template, "AWS::EKS::Cluster")
    props = cluster["Properties"]
    assert props["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert props["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    logged = {t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert logged == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    (encryption,) = props["EncryptionConfig"]
    assert _network_value(session, name, encryption["Provider"]["KeyArn"]) == {
        "Fn::GetAtt": ["ProjectKeyFDD03260", "Arn"]
    }
    assert props["AccessConfig"]["AuthenticationMode"] == "API"


def test_addons_and_pinned_charts(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    addons = {r["Properties"]["AddonName"] for r in _resources(template, "AWS::EKS::Addon").values()}
    assert addons == set(versions.ADDONS)
    charts = {
        r["Properties"]["Release"]: r["Properties"]
        for r in _resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
    }
    kind = _accelerator(_efa_group(config).instance_type).kind
    device_plugin = versions.NVIDIA_DEVICE_PLUGIN if kind == "gpu" else versions.NEURON_HELM_CHART
    expected = {device_plugin, versions.EFA_DEVICE_PLUGIN, versions.KUBEFLOW_TRAINER}
    assert set(charts) == {c.release for c in expected}
    # GPU metrics come from the CloudWatch add-on's own DCGM exporter: no second exporter on the same GPUs.
    assert not any("dcgm" in json.dumps(props).lower() for props in charts.values())
    for chart in expected:
        assert charts[chart.release]["Version"] == chart.version
        assert charts[chart.release]["Repository"] == chart.repository
    tolerated = {t["key"] for t in json.loads(charts["aws-efa-k8s-device-plugin"]["Values"])["tolerations"]}
    assert {"nvidia.com/gpu", "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"} <= tolerated


def test_fsx_is_mounted_through_a_static_persistent_volume(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    manifests = [
        json.loads(r["Properties"]["Manifest"])
        if isinstance(r["Properties"]["Manifest"], str)
        else r["Properties"]["Manifest"]
        for r in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
    ]
    text = json.dumps(manifests)
    for kind in ("StorageClass", "PersistentVolume", "PersistentVolumeClaim"):
        assert f'"kind": "{kind}"' in text or f'\\"kind\\":\\"{kind}\\"' in text
    assert "fsx.csi.aws.com" in text
    assert config.training.job.namespace in text


def test_rendered_job_requests_every_efa_and_uses_no_legacy_nccl_variables(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, _ = bp
    runtime, job = render_job(config)
    group = config.training.job_group
    it = get_instance(group.instance_type)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == it.max_efa_interfaces
    assert limits["hugepages-2Mi"] == "5120Mi" and container["resources"]["requests"] == limits
    accelerator = _accelerator(it.name)
    resource = "nvidia.com/gpu" if accelerator.kind == "gpu" else "aws.amazon.com/neuron"
    assert limits[resource] == accelerator.count
    names = {e["name"] for e in container["env"]}
    legacy = LEGACY_ENV if accelerator.kind == "gpu" else {n for n in LEGACY_ENV if n.startswith("NCCL")}
    assert not names & legacy and not any(n.startswith("RDMAV_") for n in names)
    assert {"name": "fsx", "mountPath": "/fsx"} in container["volumeMounts"]
    assert job["kind"] == "TrainJob" and job["spec"]["trainer"]["numNodes"] == (
        config.training.job.nodes or group.max_size
    )
    assert yaml.safe_dump_all([runtime, job])  # renders as YAML


def test_device_plugins_tolerate_and_select_the_accelerator_nodes(bp: tuple[str, Any, dict[str, Any]]) -> None:
    # A device plugin that does not tolerate the node's taints never schedules there: the EFA device plugin chart
    # defaults to `tolerations: []` (aws/eks-charts, stable/aws-efa-k8s-device-plugin/values.yaml).
    _, config, template = bp
    charts = {
        r["Properties"]["Release"]: json.loads(r["Properties"]["Values"])
        for r in _resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
    }
    (props,) = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::Nodegroup").values()
        if "LaunchTemplate" in r["Properties"]
    ]
    taints = {t["Key"] for t in props["Taints"]}
    kind = _accelerator(_efa_group(config).instance_type).kind
    if kind == "gpu":
        plugin = charts[versions.NVIDIA_DEVICE_PLUGIN.release]
        tolerations = plugin["tolerations"]
        (term,) = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        (expression,) = term["matchExpressions"]
        assert props["Labels"][expression["key"]] in expression["values"]
    else:
        tolerations = charts[versions.NEURON_HELM_CHART.release]["devicePlugin"]["tolerations"]
    assert taints <= {t["key"] for t in tolerations if t["operator"] == "Exists" and t["effect"] == "NoSchedule"}
    efa_tolerations = charts[versions.EFA_DEVICE_PLUGIN.release]["tolerations"]
    assert taints <= {t["key"] for t in efa_tolerations if t["operator"] == "Exists"}
    # The EFA plugin's instance-type allow-list is the blueprint's EFA types, not whatever the pinned chart lists.
    allow = charts[versions.EFA_DEVICE_PLUGIN.release]["supportedInstanceLabels"]
    assert allow == {
        "keys": ["node.kubernetes.io/instance-type"],
        "values": sorted({g.instance_type for g in config.training.efa_groups}),
    }


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes toleration matching: an empty key with Exists matches every taint; an empty effect every effect."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = str(toleration.get("operator", "Equal"))
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return operator == "Exists" or bool(toleration.get("value", "") == taint.get("value", ""))


_K8S_EFFECT = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def test_cloudwatch_observability_addon_publishes_accelerator_metrics(bp: tuple[str, Any, dict[str, Any]]) -> None:
    # The DCGM exporter (NVIDIA) and Neuron monitor come with the add-on; its agent writes to CloudWatch through
    # EKS Pod Identity, and every workload of the add-on must schedule onto the tainted accelerator nodes.
    _, _, template = bp
    (addon,) = [
        r for r in _resources(template, "AWS::EKS::Addon").values() if r["Properties"]["AddonName"] == CLOUDWATCH
    ]
    (association,) = _resources(template, "AWS::EKS::PodIdentityAssociation").values()
    assoc = association["Properties"]
    assert assoc["Namespace"] == "amazon-cloudwatch" and assoc["ServiceAccount"] == "cloudwatch-agent"
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    assert assoc["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert assoc["ClusterName"] == {"Ref": _one(template, "AWS::EKS::Cluster")[0]}
    assoc_id = next(k for k, r in template["Resources"].items() if r is association)
    assert assoc_id in addon["DependsOn"]  # credentials exist before the agent's pods start

    role = template["Resources"][role_id]["Properties"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "Condition" not in statement
    (policy,) = role["ManagedPolicyArns"]
    assert json.dumps(policy).endswith(':iam::aws:policy/CloudWatchAgentServerPolicy"]]}')
    assert "Policies" not in role
    attached = [
        r for r in _resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    assert attached == []

    tolerations = json.loads(addon["Properties"]["ConfigurationValues"])["tolerations"]
    node_taints = [
        {"key": t["Key"], "effect": _K8S_EFFECT[t["Effect"]], "value": t.get("Value", "")}
        for r in _resources(template, "AWS::EKS::Nodegroup").values()
        for t in r["Properties"].get("Taints", [])
    ]
    assert node_taints  # the accelerator group is tainted
    for key in ("nvidia.com/gpu", "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"):
        node_taints.append({"key": key, "effect": "NoSchedule", "value": "true"})
    for taint in node_taints:
        assert any(_tolerates(t, taint) for t in tolerations), taint


def test_no_full_access_managed_policies(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, _, template = bp
    assert "FullAccess" not in json.dumps(template)


def _manifest_documents(value: Any) -> list[dict[str, Any]]:
    """A KubernetesResource manifest (JSON, or an Fn::Join of JSON and references) with references as markers."""
    if isinstance(value, str):
        return list(json.loads(value))
    parts = []
    for part in value["Fn::Join"][1]:
        if isinstance(part, str):
            parts.append(part)
        elif "Ref" in part:
            parts.append(f"<Ref {part['Ref']}>")
        elif "Fn::Sub" in part:  # the training image's URI (a Docker image asset in the bootstrap repository)
            parts.append("<Sub>")
        else:
            parts.append("<GetAtt {}.{}>".format(*part["Fn::GetAtt"]))
    return list(json.loads("".join(parts)))


def test_fsx_volume_points_the_csi_driver_at_this_file_system(bp: tuple[str, Any, dict[str, Any]]) -> None:
    _, config, template = bp
    fsx_id, _ = _one(template, "AWS::FSx::FileSystem")
    docs = [
        doc
        for r in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
        for doc in _manifest_documents(r["Properties"]["Manifest"])
    ]
    (volume,) = [d for d in docs if d["kind"] == "PersistentVolume"]
    (claim,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    csi = volume["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com" and csi["volumeHandle"] == f"<Ref {fsx_id}>"
    assert csi["volumeAttributes"] == {
        "dnsname": f"<GetAtt {fsx_id}.DNSName>",
        "mountname": f"<GetAtt {fsx_id}.LustreMountName>",
    }
    assert volume["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"]["namespace"] == config.training.job.namespace
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert volume["spec"]["capacity"]["storage"] == f"{config.training.fsx.storage_capacity_gib}Gi"
