"""The batch-training blueprint as AWS Batch sees it at create, update and the first multi-node job.

- Network of the job: every container gets its own interface (awsvpc) with the compute environment's groups or
  the VPC's default group; the template must let the containers reach each other (torchrun rendezvous, NCCL
  bootstrap, ssh for MPI) and HTTPS out, and the host reach FSx.
- Update: a launch-template change is an infrastructure update, which only BEST_FIT_PROGRESSIVE takes.
- AMI and user data: Amazon Linux 2023 GPU AMI, dnf, EFA installed only when missing, FSx mounted on its own.
"""

from __future__ import annotations

import email
import email.message
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlstack.constructs.training.batch import TORCHRUN_PORT
from mlstack.constructs.training.batch_user_data import HOST_SETUP, MOUNT_FSX
from tests.conftest import selected_blueprints
from tests.synth import Session
from tests.training.reachability import Network, batch_container_groups, batch_host_groups

BLUEPRINT = "batch-training"
STACK = f"{BLUEPRINT}-TrainingClusterStack"
INTERNET = "52.216.0.10"  # an S3 address: reached through the gateway endpoint or NAT, always on 443


@pytest.fixture(scope="module")
def net(session: Session) -> Network:
    if BLUEPRINT not in selected_blueprints():
        pytest.skip(f"{BLUEPRINT} not selected by MLSTACK_TEST_BLUEPRINTS")
    templates = session.blueprints[BLUEPRINT].templates
    return Network({f"{BLUEPRINT}-{stack_id}": t for stack_id, t in templates.items()})


def _resource(net: Network, kind: str) -> dict[str, Any]:
    (found,) = [r for r in net.templates[STACK]["Resources"].values() if r["Type"] == kind]
    return dict(found)


# ------------------------------------------------------------------------------------------ 8: network of the job


def test_containers_get_the_vpc_default_group_because_the_launch_template_has_the_interfaces(net: Network) -> None:
    ce = _resource(net, "AWS::Batch::ComputeEnvironment")["Properties"]["ComputeResources"]
    # Batch refuses compute-environment groups together with launch-template interfaces (aws/aws-cdk#21577).
    assert "SecurityGroupIds" not in ce
    groups = batch_container_groups(net, STACK)
    assert groups == [("batch-training-NetworkStack", groups[0][1], "default")]


@pytest.mark.parametrize("port", [TORCHRUN_PORT, 2222, 40000])  # rendezvous, sshd for mpirun, NCCL bootstrap
def test_containers_reach_each_other(net: Network, port: int) -> None:
    tasks = batch_container_groups(net, STACK)
    assert net.allows(tasks, tasks, "tcp", port)


def test_containers_reach_https_and_nothing_else_outside(net: Network) -> None:
    tasks = batch_container_groups(net, STACK)
    assert net.allows_out(tasks, "tcp", 443, INTERNET)
    assert not net.allows_out(tasks, "tcp", 80, INTERNET)
    assert not net.allows_out(tasks, "udp", 53, INTERNET)  # DNS goes to the VPC resolver, which no group filters


def test_hosts_reach_each_other_and_fsx(net: Network) -> None:
    hosts = batch_host_groups(net, STACK)
    assert net.allows(hosts, hosts, "tcp", 12345) and net.allows(hosts, hosts, "udp", 12345)  # EFA group: all
    fsx_stack, _, fsx_res = net.resource(STACK, {"Ref": _fsx_id(net)})
    fsx_groups = [net.group(fsx_stack, g) for g in fsx_res["Properties"]["SecurityGroupIds"]]
    for port in (988, 1018, 1023):
        assert net.allows(hosts, fsx_groups, "tcp", port), port
    assert net.allows_out(hosts, "tcp", 443, INTERNET)  # the ECS agent, image pulls, the EFA installer


def _fsx_id(net: Network) -> str:
    (logical,) = [k for k, r in net.templates[STACK]["Resources"].items() if r["Type"] == "AWS::FSx::FileSystem"]
    return str(logical)


# ------------------------------------------------------------------------------------------------- 9: updates


def test_compute_environment_takes_launch_template_changes(net: Network) -> None:
    props = _resource(net, "AWS::Batch::ComputeEnvironment")["Properties"]
    # "Update a compute environment": infrastructure updates (launch template, AMI, user data) need
    # BEST_FIT_PROGRESSIVE or a Spot strategy; multi-node jobs cannot use Spot.
    assert props["ComputeResources"]["AllocationStrategy"] == "BEST_FIT_PROGRESSIVE"
    assert props["ReplaceComputeEnvironment"] is False  # update in place, running jobs are not cut off
    version = props["ComputeResources"]["LaunchTemplate"]["Version"]
    assert version == {"Fn::GetAtt": [version["Fn::GetAtt"][0], "LatestVersionNumber"]}  # a change is visible


# ------------------------------------------------------------------------------------------- 10: AMI, user data


def _user_data(net: Network) -> str:
    """The decoded user data with every token replaced by its logical id (as CloudFormation would fill it)."""
    data = _resource(net, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]["UserData"]
    pieces = data["Fn::Base64"]["Fn::Join"][1]
    return "".join(str(p) if isinstance(p, str) else f"<{json.dumps(p)}>" for p in pieces)


def test_amazon_linux_2023_gpu_ami_and_dnf(net: Network) -> None:
    ce = _resource(net, "AWS::Batch::ComputeEnvironment")["Properties"]["ComputeResources"]
    assert ce["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]
    text = _user_data(net)
    assert "dnf install -y lustre-client" in text and "amazon-linux-extras" not in text and "yum " not in text


def test_fsx_is_mounted_in_its_own_part_before_efa_and_efa_installs_only_when_missing(net: Network) -> None:
    text = _user_data(net)
    parts = [p for p in text.split("--==MLSTACK-BATCH==") if "#!/bin/bash" in p and "ECS_CONTAINER_STOP" not in p]
    assert len(parts) == 3  # the third: the CloudWatch agent (tests/training/test_host_metrics.py)
    fsx, host, agent = parts
    assert "install_cloudwatch_agent" not in fsx + host and "amazon-cloudwatch-agent" in agent
    assert "mount " in fsx and "retry" in fsx and "efa_installer" not in fsx
    assert _fsx_id(net) in fsx  # the DNS and mount names come from the file system
    assert "efa_installer.sh" in host and "mount " not in host
    assert "if /opt/amazon/efa/bin/fi_info -p efa" in host
    assert host.index("fi_info -p efa") < host.index("efa_installer.sh")


def test_metadata_hop_limit_is_one_and_awsvpc_containers_are_kept_from_imds(net: Network) -> None:
    data = _resource(net, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    assert "ECS_AWSVPC_BLOCK_IMDS=true" in _user_data(net)
    job = _resource(net, "AWS::Batch::JobDefinition")["Properties"]
    env = {e["Name"] for e in job["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Environment"]}
    assert "AWS_REGION" in env and not env & {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"}


def test_nccl_never_bootstraps_over_the_ecs_agents_link_local_interface(net: Network) -> None:
    from mlstack.workloads import nccl_batch

    job = _resource(net, "AWS::Batch::JobDefinition")["Properties"]
    env = {e["Name"]: e["Value"] for e in job["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Environment"]}
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker,ecs" == nccl_batch.NCCL_SOCKET_IFNAME


def test_user_data_scripts_pass_shellcheck() -> None:
    shellcheck = Path(sys.executable).with_name("shellcheck")
    scripts = [str(MOUNT_FSX), str(HOST_SETUP)]
    result = subprocess.run(
        [str(shellcheck), "--severity=style", "--shell=bash", *scripts], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_mount_script_retries_then_fails_loudly(tmp_path: Path) -> None:
    """Run mount_fsx.sh with stub commands: the mount is retried, and a mount that never works fails the part."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name, body in {
        "mount.lustre": "exit 0",
        "mount": f'echo mount >>"{calls}"; exit 1',
        "mountpoint": "exit 1",
        "sleep": "exit 0",
    }.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    fstab = tmp_path / "fstab"
    fstab.write_text("")
    script = MOUNT_FSX.read_text(encoding="utf-8").replace("/etc/fstab", str(fstab))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FSX_DNS_NAME": "fs-1.fsx",
        "FSX_MOUNT_NAME": "abc",
        "FSX_PATH": str(tmp_path / "fsx"),
    }
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert calls.read_text().count("mount") == 10
    assert "fs-1.fsx@tcp:/abc" in fstab.read_text()


def test_the_user_data_is_mime_multipart_with_one_shell_part_per_step() -> None:
    from aws_cdk import App, Stack

    from mlstack.constructs.training.batch_user_data import user_data

    stack = Stack(App(), "S")
    value = stack.resolve(user_data(fsx_path="/fsx", fsx_dns_name="fs-1.fsx", fsx_mount_name="abc"))["Fn::Base64"]
    text = value if isinstance(value, str) else "".join(value["Fn::Join"][1])
    message = email.message_from_string(text)
    assert message.is_multipart()
    payloads = [str(p.get_payload()) for p in message.get_payload() if isinstance(p, email.message.Message)]
    assert [p.splitlines()[0] for p in payloads] == ["#!/bin/bash", "#!/bin/bash"]
    assert "FSX_DNS_NAME=fs-1.fsx" in payloads[0] and "fi_info" in payloads[1]


def test_the_acceptance_script_reads_outputs_and_names_the_stack_has(net: Network) -> None:
    """`mlstack acceptance batch-training` runs against the deployed stack: every output it reads exists, the job
    queue it submits to is the stack's, and its job definition differs from the training one."""
    from mlstack.config import load
    from mlstack.workloads import nccl_batch

    config = load(BLUEPRINT)
    (script,) = nccl_batch.render(config, "img:1").values()
    template = net.templates[STACK]
    for key in ("BatchJobLogGroup", "BatchJobRoleArn"):
        assert f"OutputKey=='{key}'" in script and key in template["Outputs"]
    queue = _resource(net, "AWS::Batch::JobQueue")["Properties"]["JobQueueName"]
    assert f"--job-queue {queue} " in script
    training = _resource(net, "AWS::Batch::JobDefinition")["Properties"]["JobDefinitionName"]
    assert (
        f"--job-definition {training}-" not in script and "--job-definition " + nccl_batch.stack_name(config) in script
    )


# ------------------------------------------------------------------------------- first job: image, updates, IAM


def _container(net: Network) -> dict[str, Any]:
    job = _resource(net, "AWS::Batch::JobDefinition")["Properties"]
    return dict(job["NodeProperties"]["NodeRangeProperties"][0]["Container"])


def test_the_job_runs_the_shipped_script_in_the_image_the_deploy_builds(net: Network, session: Session) -> None:
    """The first `aws batch submit-job` needs the script on every node: it is in the image `cdk deploy` builds and
    pushes to the bootstrap repository, not on FSx (which starts empty)."""
    from mlstack.config.training import SHIPPED_SCRIPT
    from mlstack.k8s.image import IMAGE_OUTPUT, TRAIN_DOCKERFILE, TRAIN_IMAGE_FILES

    container = _container(net)
    assert "cdk-hnb659fds-container-assets-" in json.dumps(container["Image"])
    assert f" {SHIPPED_SCRIPT} --checkpoint-dir " in container["Command"][-1]
    assert "/fsx/code" not in container["Command"][-1]
    outputs = net.templates[STACK]["Outputs"]
    assert IMAGE_OUTPUT in outputs and "BatchJobDefinition" in outputs and "BatchJobQueue" in outputs
    assembly = Path(session.outdir, f"assembly-{BLUEPRINT}")
    assets = json.loads(next(assembly.glob("*TrainingClusterStack*.assets.json")).read_text())
    (docker,) = assets["dockerImages"].values()
    assert docker["source"]["dockerFile"] == TRAIN_DOCKERFILE
    staged = assembly / docker["source"]["directory"]
    assert {str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file()} == set(TRAIN_IMAGE_FILES)
    assert SHIPPED_SCRIPT.removeprefix("/opt/mlstack/runtime/") in TRAIN_IMAGE_FILES


def test_instances_can_pull_from_the_bootstrap_repository(net: Network) -> None:
    # ECS on EC2 pulls with the instance role; AmazonEC2ContainerServiceforEC2Role allows ecr:GetAuthorizationToken,
    # BatchGetImage and GetDownloadUrlForLayer on "*" (AWS managed policy reference), the bootstrap repository too.
    ce = _resource(net, "AWS::Batch::ComputeEnvironment")["Properties"]["ComputeResources"]
    profile = net.templates[STACK]["Resources"][ce["InstanceRole"]["Fn::GetAtt"][0]]
    role = net.templates[STACK]["Resources"][profile["Properties"]["Roles"][0]["Ref"]]
    arns = json.dumps(role["Properties"]["ManagedPolicyArns"])
    assert "service-role/AmazonEC2ContainerServiceforEC2Role" in arns


def test_training_image_context_makes_batch_build_nothing(tmp_path: Path) -> None:
    import aws_cdk as cdk

    from mlstack import blueprint
    from mlstack.config import load
    from mlstack.k8s.image import IMAGE_OUTPUT, with_job_image
    from mlstack.synth_all import cdk_json_context
    from tests.synth import TEST_CONTEXT

    mine = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"
    app = cdk.App(outdir=str(tmp_path), context={**cdk_json_context(), **TEST_CONTEXT})
    built = blueprint.build(app, with_job_image(load(BLUEPRINT), mine))
    assert built.training is not None
    template = app.synth().get_stack_artifact(built.training.artifact_id).template
    assets = json.loads(next(tmp_path.glob("*TrainingClusterStack*.assets.json")).read_text())
    assert not assets.get("dockerImages") and IMAGE_OUTPUT not in template["Outputs"]
    (job,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"]
    assert job["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Image"] == mine


def test_an_infrastructure_update_lets_running_jobs_go_on_for_the_most_batch_allows(net: Network) -> None:
    props = _resource(net, "AWS::Batch::ComputeEnvironment")["Properties"]
    # API_UpdatePolicy: jobExecutionTimeoutMinutes 1..7200, default 30; terminateJobsOnUpdate default false.
    assert props["UpdatePolicy"] == {"JobExecutionTimeoutMinutes": 7200, "TerminateJobsOnUpdate": False}


def test_torchrun_waits_30_minutes_for_late_nodes(net: Network) -> None:
    command = _container(net)["Command"][-1]
    assert "--rdzv_conf=timeout=1800 " in command and "--master_addr=" in command


def test_job_role_trusts_only_this_accounts_ecs_tasks(net: Network) -> None:
    job_role_arn = _container(net)["JobRoleArn"]
    role = net.templates[STACK]["Resources"][job_role_arn["Fn::GetAtt"][0]]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
