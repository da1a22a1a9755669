"""Find a blueprint's run-time principals: one function per resource type that uses a role at run time.

Each says which role, as which kind of principal (`calls.KINDS`), with which facts; `find_principals` runs
them over every resource of every stack, then adds the calls of mlstack's own Lambda handlers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlstack.access.handlers import handler_calls, kind_of, sagemaker_jobs_of_handler
from mlstack.access.host_agent import host_agent_facts, pools_run_host_agent, runs_host_agent
from mlstack.access.karpenter import KARPENTER_SERVICE_ACCOUNT, karpenter_pools
from mlstack.access.model import EXECUTION_ID, Facts, Principal, json_gets, merge, pipeline_steps, pipeline_value
from mlstack.access.principals import Finder
from mlstack.access.resolve import Stacks
from mlstack.access.workloads import workload_facts, workload_images

Props = dict[str, Any]

# Images of the EKS add-ons every node pulls (VPC CNI, kube-proxy, CoreDNS, Pod Identity agent): Amazon EKS
# add-on container image addresses, https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html
EKS_ADDON_IMAGES = ("amazon-k8s-cni", "eks/kube-proxy", "eks/coredns", "eks/eks-pod-identity-agent")
EKS_ADDON_ACCOUNT = "602401143452"  # us-east-1 and most commercial regions (same page)


def pipeline(f: Finder, stack: str, lid: str, props: Props) -> None:
    role = f.stacks.text(stack, props["RoleArn"])
    definition = json.loads(f.stacks.text(stack, props["PipelineDefinition"]["PipelineDefinitionBody"]))
    parameters = {p["Name"]: p.get("DefaultValue") for p in definition.get("Parameters", [])}
    steps = pipeline_steps(definition)
    facts: Facts = {}
    for name, step in steps.items():
        args = pipeline_value(step.get("Arguments", {}), steps, parameters)
        job = f"pipelines-{EXECUTION_ID}-{name}-a1b2c3d4e5".lower()
        if step["Type"] == "Processing":
            f.sagemaker_job(role, "ProcessingJob", job, args)
        elif step["Type"] == "Training":
            f.sagemaker_job(role, "TrainingJob", job, args)
        elif step["Type"] == "RegisterModel":
            group = str(args["ModelPackageGroupName"]).lower()
            package = f"arn:aws:sagemaker:{f.stacks.region}:{f.stacks.account}:model-package/{group}/1"
            facts = merge(facts, {"model_packages": [{"package_arn": package}]})
    for ref in json_gets(definition):
        _, step_name, _, file_name = ref.split(".", 3)
        step = steps[step_name]
        for prop in step.get("PropertyFiles", []):
            if prop["PropertyFileName"] == file_name:
                outputs = step["Arguments"]["ProcessingOutputConfig"]["Outputs"]
                output = next(o for o in outputs if o["OutputName"] == prop["OutputName"])
                uri = pipeline_value(output["S3Output"]["S3Uri"], steps, parameters)
                read = f.s3(f"{uri}/{prop['FilePath']}", prefix=False, kind="in")
                facts = merge(
                    facts, {"property_files": read["inputs"], "property_file_keys": read.get("input_keys", [])}
                )
    facts["assumed_for"] = [{"arn": f.stacks.arn(stack, lid)}]
    f.add(role, "sagemaker-pipeline", f"pipeline {f.stacks.name(stack, lid)}", facts)


def model(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    role = s.text(stack, props["ExecutionRoleArn"])
    containers = [props["PrimaryContainer"]] if "PrimaryContainer" in props else props.get("Containers", [])
    parts: list[Facts] = []
    for container in s.resolve(stack, containers):
        parts.append(f.image(str(container["Image"])))
        if "ModelDataUrl" in container:
            parts.append(f.s3(str(container["ModelDataUrl"]), prefix=False, kind="in"))
        source = container.get("ModelDataSource", {}).get("S3DataSource")
        if source:
            parts.append(f.s3(str(source["S3Uri"]), prefix=source.get("S3DataType") == "S3Prefix", kind="in"))
    vpc = s.resolve(stack, props.get("VpcConfig"))
    if vpc:
        parts.append(f.vpc(vpc["Subnets"], vpc["SecurityGroupIds"]))
    model_name = s.name(stack, lid)
    for config_lid, config in s.resources(stack).items():
        if config["Type"] != "AWS::SageMaker::EndpointConfig":
            continue
        cprops = s.resolve(stack, config["Properties"])
        variants = [v for v in cprops.get("ProductionVariants", []) if v.get("ModelName") == model_name]
        if not variants:
            continue
        for endpoint_lid, endpoint in s.resources(stack).items():
            if endpoint["Type"] == "AWS::SageMaker::Endpoint" and endpoint["Properties"].get("EndpointConfigName") in (
                {"Fn::GetAtt": [config_lid, "EndpointConfigName"]},
                {"Ref": config_lid},
            ):
                name = s.name(stack, endpoint_lid)
                for variant in variants:
                    parts.append(
                        f.logs(f"/aws/sagemaker/Endpoints/{name}", f"{variant['VariantName']}/i-0123456789abcdef0")
                    )
        output = cprops.get("AsyncInferenceConfig", {}).get("OutputConfig", {})
        for path in ("S3OutputPath", "S3FailurePath"):
            if path in output:
                parts.append(f.s3(output[path], prefix=True, kind="out"))
        if output.get("KmsKeyId"):
            parts.append({"output_keys": [{"key": f._key_arn(output["KmsKeyId"])}]})
        for topic in output.get("NotificationConfig", {}).values():
            if isinstance(topic, str) and topic.startswith("arn:aws:sns:"):
                parts.append({"topics": [{"topic": topic}]})
                if topic in f.topic_keys:
                    parts.append({"topic_keys": [{"key": f.topic_keys[topic]}]})
        capture = cprops.get("DataCaptureConfig")
        if capture:
            parts.append(f.s3(capture["DestinationS3Uri"], prefix=True, kind="out"))
            if capture.get("KmsKeyId"):
                parts.append({"output_keys": [{"key": f._key_arn(capture["KmsKeyId"])}]})
    f.add(role, "sagemaker-endpoint", f"model {model_name}", {"assumed_for": [{"arn": s.arn(stack, lid)}]}, *parts)


def function(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    env = s.resolve(stack, props.get("Environment", {}).get("Variables", {}))
    kind = kind_of(str(props.get("Handler", "")), env)
    if kind is None:
        return
    role = s.text(stack, props["Role"])
    name = s.name(stack, lid)
    group = props.get("LoggingConfig", {}).get("LogGroup")
    group_name = s.text(stack, group) if group is not None else f"/aws/lambda/{name}"
    parts: list[Facts] = [
        {"function": [{"kind": kind, "env": json.dumps(env, sort_keys=True), "role": role}]},
        f.logs(group_name, "2026/01/01/[$LATEST]0123456789abcdef0123456789abcdef"),
    ]
    if props.get("VpcConfig"):
        vpc = s.resolve(stack, props["VpcConfig"])
        parts.append(f.vpc(vpc.get("SubnetIds", []), vpc.get("SecurityGroupIds", [])))
    if props.get("KmsKeyArn"):
        parts.append({"env_keys": [{"key": s.text(stack, props["KmsKeyArn"])}]})
    f.add(role, "lambda", f"function {name} ({kind})", {"assumed_for": [{"arn": s.arn(stack, lid)}]}, *parts)


def state_machine(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    role = s.text(stack, props["RoleArn"])
    definition = json.loads(s.text(stack, props["DefinitionString"]))
    facts: Facts = {}
    for state in _states(definition):
        resource, params = str(state.get("Resource", "")), state.get("Parameters", {})
        if resource.startswith("arn:aws:lambda:"):
            facts = merge(facts, {"functions": [{"function": resource}]})
        elif resource.endswith(":lambda:invoke"):
            facts = merge(facts, {"functions": [{"function": str(params.get("FunctionName"))}]})
        elif resource.endswith(":dynamodb:putItem"):
            table = f"arn:aws:dynamodb:{s.region}:{s.account}:table/{params['TableName']}"
            facts = merge(facts, {"tables": [{"table": table}]})
        elif resource.endswith(":sqs:sendMessage"):
            name = str(params["QueueUrl"]).rsplit("/", 1)[-1]
            queue = f"arn:aws:sqs:{s.region}:{s.account}:{name}"
            facts = merge(facts, {"queues": [{"queue": queue}]})
            if queue in f.queue_keys:
                facts = merge(facts, {"queue_keys": [{"key": f.queue_keys[queue]}]})
    if props.get("LoggingConfiguration", {}).get("Destinations"):
        facts["log_delivery"] = [{}]
    if props.get("TracingConfiguration", {}).get("Enabled"):
        facts["tracing"] = [{}]
    facts["assumed_for"] = [{"arn": s.arn(stack, lid)}]
    f.add(role, "step-functions", f"state machine {s.name(stack, lid)}", facts)


def _states(definition: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for state in definition.get("States", {}).values():
        found.append(state)
        for branch in state.get("Branches", []) + ([state["Iterator"]] if "Iterator" in state else []):
            found += _states(branch)
        if "ItemProcessor" in state:
            found += _states(state["ItemProcessor"])
    return found


def rule(f: Finder, stack: str, lid: str, props: Props) -> None:
    for target in f.stacks.resolve(stack, props.get("Targets", [])):
        if target.get("RoleArn") and str(target["Arn"]).startswith("arn:aws:states:"):
            facts = {
                "state_machines": [{"state_machine": target["Arn"]}],
                "assumed_for": [{"arn": f.stacks.arn(stack, lid)}],
            }
            f.add(target["RoleArn"], "events-target", f"rule {lid} -> state machine", facts)


def hyperpod(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    cluster = s.text(stack, props.get("ClusterName", lid))
    vpc = s.resolve(stack, props.get("VpcConfig"))
    for group in s.resolve(stack, props.get("InstanceGroups", [])):
        life = group["LifeCycleConfig"]
        uri = str(life["SourceS3Uri"]).rstrip("/")
        parts = [
            f.s3(uri, prefix=True, kind="in"),
            f.s3(f"{uri}/{life['OnCreate']}", prefix=False, kind="in"),
            f.logs(
                f"/aws/sagemaker/Clusters/{cluster}/a1b2c3d4e5f6",
                f"LifecycleConfig/{group['InstanceGroupName']}/i-0123",
            ),
        ]
        if vpc:
            parts.append(f.vpc(vpc["Subnets"], vpc["SecurityGroupIds"]))
        parts.append(host_agent_facts(s, stack))
        f.add(group["ExecutionRole"], "hyperpod", f"cluster {cluster} group {group['InstanceGroupName']}", *parts)
    if props.get("ClusterRole") and s.resolve(stack, props.get("AutoScaling", {})).get("Mode") == "Enable":
        # The cluster's ARN carries a generated 12-character ID.
        facts: Facts = {
            "scaled_clusters": [{"cluster_arn": f"arn:aws:sagemaker:{s.region}:{s.account}:cluster/a1b2c3d4e5f6"}]
        }
        keys = {
            str(v["EbsVolumeConfig"]["VolumeKmsKeyId"])
            for group in s.resolve(stack, props.get("InstanceGroups", []))
            for v in group.get("InstanceStorageConfigs", [])
            if v.get("EbsVolumeConfig", {}).get("VolumeKmsKeyId")
        }
        facts["volume_keys"] = [{"key": f._key_arn(key)} for key in sorted(keys)]
        f.add(
            str(s.resolve(stack, props["ClusterRole"])), "hyperpod-autoscaler", f"cluster {cluster} autoscaling", facts
        )


def compute_environment(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    profile = s.text(stack, props.get("ComputeResources", {}).get("InstanceRole", ""))
    images = [
        f.image(str(c["Image"]))
        for _, _, r in s.all_resources()
        if r["Type"] == "AWS::Batch::JobDefinition"
        for c in _containers(s.resolve(stack, r["Properties"]))
    ]
    for plid, p in s.resources(stack).items():
        if p["Type"] == "AWS::IAM::InstanceProfile" and s.arn(stack, plid) == profile:
            for role in s.resolve(stack, p["Properties"]["Roles"]):
                arn = f"arn:aws:iam::{s.account}:role/{role}"
                logs = f.logs("/aws/batch/job", "train/default/0123456789abcdef")
                agent = host_agent_facts(s, stack)
                f.add(arn, "batch-instance", f"compute environment {lid}", {"agent": [{}]}, logs, agent, *images)


def _containers(props: Props) -> list[dict[str, Any]]:
    if "ContainerProperties" in props:
        return [props["ContainerProperties"]]
    return [r["Container"] for r in props.get("NodeProperties", {}).get("NodeRangeProperties", []) if "Container" in r]


def job_definition(f: Finder, stack: str, lid: str, props: Props) -> None:
    for container in _containers(f.stacks.resolve(stack, props)):
        if container.get("JobRoleArn"):
            f.add(container["JobRoleArn"], "batch-job", f"job definition {lid}", {})


def _cluster_arn(f: Finder, stack: str, cluster: Any) -> str:
    return f"arn:aws:eks:{f.stacks.region}:{f.stacks.account}:cluster/{f.stacks.text(stack, cluster)}"


def nodegroup(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    cluster = _cluster_arn(f, stack, props["ClusterName"])
    images = [
        f.image(f"{EKS_ADDON_ACCOUNT}.dkr.ecr.{s.region}.amazonaws.com/{image}:latest") for image in EKS_ADDON_IMAGES
    ]
    # The kubelet also pulls the ECR images of the stack's own Deployments (the vLLM servers' DLC image).
    images += [f.image(image) for image in workload_images(f, stack)]
    parts: list[Facts] = [{"agent": [{}]}, *images]
    if any(r["Type"] == "AWS::EKS::PodIdentityAssociation" for r in s.resources(stack).values()):
        parts.append({"pod_identity": [{"cluster": cluster}]})
    if runs_host_agent(s, stack, props):
        parts.append(host_agent_facts(s, stack))
    f.add(s.text(stack, props["NodeRole"]), "eks-node", f"node group {lid}", *parts)


# Service accounts of the agents whose calls the table knows, by the kind of their calls.
POD_AGENTS = {"aws-node": "vpc-cni", "cloudwatch-agent": "cloudwatch-agent"}


def pod_identity(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    role = s.text(stack, props["RoleArn"])
    account = s.text(stack, props["ServiceAccount"])
    f.add(
        role,
        "eks-pod-identity",
        f"service account {s.text(stack, props['Namespace'])}/{account}",
        {"trust": [{"role": role}]},
    )
    if account == KARPENTER_SERVICE_ACCOUNT:
        cluster = s.text(stack, props["ClusterName"])
        f.add(role, "karpenter", f"{account} on {cluster}", {"pools": karpenter_pools(s, stack, cluster)})
    workload = workload_facts(f, stack, s.text(stack, props["Namespace"]), account)
    if workload is not None:
        f.add(role, workload[0], f"service account {account}", *workload[1])
    kind = POD_AGENTS.get(account)
    if kind is not None:
        cluster = s.text(stack, props["ClusterName"])
        logs = f.logs(f"/aws/containerinsights/{cluster}/performance", "ip-10-0-0-1.ec2.internal")
        f.add(role, kind, f"{account} on {cluster}", {"agent": [{}]}, logs if kind == "cloudwatch-agent" else {})


def access_entry(f: Finder, stack: str, lid: str, props: Props) -> None:
    """An EC2_LINUX access entry: the role of nodes that join without a node group (Karpenter's)."""
    if props.get("Type") != "EC2_LINUX":
        return
    s = f.stacks
    cluster = _cluster_arn(f, stack, props["ClusterName"])
    images = [
        f.image(f"{EKS_ADDON_ACCOUNT}.dkr.ecr.{s.region}.amazonaws.com/{image}:latest") for image in EKS_ADDON_IMAGES
    ]
    # Karpenter's nodes run the stack's Deployments too (the vLLM servers of a serving pool): their kubelet pulls them.
    images += [f.image(image) for image in workload_images(f, stack)]
    parts: list[Facts] = [{"agent": [{}]}, *images, {"pod_identity": [{"cluster": cluster}]}]
    if pools_run_host_agent(s, stack):
        parts.append(host_agent_facts(s, stack))
    f.add(s.text(stack, props["PrincipalArn"]), "eks-node", f"access entry {lid} (EC2_LINUX)", *parts)


def addon(f: Finder, stack: str, lid: str, props: Props) -> None:
    """An add-on's own Pod Identity associations (the VPC CNI's `aws-node` in kube-system)."""
    for association in f.stacks.resolve(stack, props.get("PodIdentityAssociations", [])):
        pod_identity(
            f,
            stack,
            lid,
            {
                "RoleArn": association["RoleArn"],
                "ServiceAccount": association["ServiceAccount"],
                "Namespace": "kube-system",
                "ClusterName": props["ClusterName"],
            },
        )


def instance(f: Finder, stack: str, lid: str, props: Props) -> None:
    s = f.stacks
    clusters = [
        _cluster_arn(f, stack, {"Ref": c}) for c, r in s.resources(stack).items() if r["Type"] == "AWS::EKS::Cluster"
    ]
    profile = props.get("IamInstanceProfile")
    if not clusters or not isinstance(profile, dict) or "Ref" not in profile:
        return
    for role in s.resolve(stack, s.find(stack, profile["Ref"])["Properties"]["Roles"]):
        arn = f"arn:aws:iam::{s.account}:role/{role}"
        f.add(arn, "eks-admin-host", f"instance {lid}", {"agent": [{}], "clusters": [{"cluster": c} for c in clusters]})


BY_TYPE: dict[str, Callable[[Finder, str, str, Props], None]] = {
    "AWS::SageMaker::Pipeline": pipeline,
    "AWS::SageMaker::Model": model,
    "AWS::Lambda::Function": function,
    "AWS::StepFunctions::StateMachine": state_machine,
    "AWS::Events::Rule": rule,
    "AWS::SageMaker::Cluster": hyperpod,
    "AWS::Batch::ComputeEnvironment": compute_environment,
    "AWS::Batch::JobDefinition": job_definition,
    "AWS::EKS::Nodegroup": nodegroup,
    "AWS::EKS::PodIdentityAssociation": pod_identity,
    "AWS::EKS::Addon": addon,
    "AWS::EKS::AccessEntry": access_entry,
    "AWS::EC2::Instance": instance,
}


def find_principals(stacks: Stacks) -> list[Principal]:
    finder = Finder(stacks)
    for stack, lid, resource in stacks.all_resources():
        find = BY_TYPE.get(resource["Type"])
        if find is not None:
            find(finder, stack, lid, resource.get("Properties", {}))
    for role_arn, principal in list(finder.principals.items()):
        for use in list(principal.uses):
            if use.kind == "lambda":
                for kind, what, facts in handler_calls(finder, use.facts):
                    finder.add(role_arn, kind, what, facts)
                for job in sagemaker_jobs_of_handler(finder, use.facts):
                    finder.add(*job)
    return sorted(finder.principals.values(), key=lambda p: (p.stack, p.logical_id))
