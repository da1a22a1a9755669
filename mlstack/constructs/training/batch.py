"""`BatchMultiNodeTraining`: AWS Batch multi-node parallel (MNP) training on EFA instances.

A managed EC2 compute environment (never Spot: MNP jobs do not run on Spot compute environments) launches the
instances from a launch template with every EFA the catalog lays out, in a cluster placement group unless a
reservation fixes placement; a job queue; a `multinode` job definition that runs `torchrun` on every node with one
`/dev/infiniband/uverbsN` device per EFA, FSx for Lustre at /fsx, logs in a KMS-encrypted log group.

Two networks per node. The host's interfaces (the launch template's, with the EFA group and `security_groups`)
carry EFA, Lustre and the ECS agent. Each multi-node container gets an interface of its own (`awsvpc` mode) with
the compute environment's security groups, or the VPC's default group when it names none (AWS Batch User Guide,
"Compute environment considerations for MNP", docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html);
and Batch accepts either compute-environment groups or launch-template interfaces, never both ("Either compute
environment Security Groups or Network Interfaces in Launch template are exclusively allowed", aws/aws-cdk#21577).
EFA needs the interfaces, so the containers get the default group: `vpc_default_security_group_id`, to which this
construct adds what a job needs (node to node TCP: torchrun rendezvous, NCCL bootstrap, ssh for MPI; HTTPS out).

Usable from any CDK app (no blueprint needed)::

    efa = EfaNetworking(stack, "Efa", vpc=vpc, subnet=subnet)
    BatchMultiNodeTraining(stack, "Batch", name="train", subnet=subnet, efa=efa, security_groups=[egress_sg],
                           key=key, instance_type="p5.48xlarge", max_nodes=4, image="<training image>")
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Literal

from aws_cdk import Aws, RemovalPolicy, Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from mlstack.catalog import efa_interface_count, get_instance
from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.training.batch_hosts import container_instances
from mlstack.constructs.training.batch_job import retry_strategy, shell_word
from mlstack.constructs.training.efa import EfaNetworking
from mlstack.constructs.training.metric_names import HostAgent

FSX_PATH = "/fsx"
TORCHRUN_PORT = 29500
NCCL_SOCKET_IFNAME = "^lo,docker,ecs"
"""Every interface of an awsvpc container but loopback, Docker's and the ECS agent's link-local `ecs-eth0`."""
ImageType = Literal["ECS_AL2023_NVIDIA", "ECS_AL2023", "ECS_AL2_NVIDIA", "ECS_AL2"]
ALLOCATION_STRATEGY = "BEST_FIT_PROGRESSIVE"
"""Batch applies a launch-template, AMI or user-data change to a running compute environment ("infrastructure
update") only with BEST_FIT_PROGRESSIVE or a Spot strategy; with BEST_FIT such an update fails and the stack update
rolls back (AWS Batch User Guide, "Update a compute environment", updating-compute-environments.html). Multi-node
jobs cannot use Spot, and with one instance type BEST_FIT_PROGRESSIVE picks exactly what BEST_FIT picks."""
UPDATE_JOB_TIMEOUT_MINUTES = 7200
"""How long an infrastructure update lets a running job go on before Batch stops it to replace its instances: the
maximum of `UpdatePolicy.jobExecutionTimeoutMinutes` (1 to 7200; the default, 30, ends a multi-day job half an hour
after any `cdk deploy` that touches the launch template, AMI or user data). AWS Batch API Reference, "UpdatePolicy"
(docs.aws.amazon.com/batch/latest/APIReference/API_UpdatePolicy.html)."""
RENDEZVOUS_TIMEOUT_SECONDS = 1800
"""torchrun's static rendezvous (a TCPStore on the main node) waits this long for every node's agent; its default,
600 s, is shorter than a worker can need: Batch starts the other nodes only once the main node runs, and each then
pulls the training image (several GB) before torchrun starts. `--rdzv_conf timeout=` sets it
(torch.distributed.elastic.rendezvous.static_tcp_rendezvous, `timeout`)."""
DEFAULT_SCRIPT = "/opt/mlstack/runtime/workloads/train.py"
"""Where runtime/containers/train.Dockerfile puts the reference script."""


def uverbs_devices(instance_type: str) -> list[batch.CfnJobDefinition.DeviceProperty]:
    """One `/dev/infiniband/uverbsN` per EFA of the type (the container path must equal the host path)."""
    return [
        batch.CfnJobDefinition.DeviceProperty(
            host_path=f"/dev/infiniband/uverbs{i}",
            container_path=f"/dev/infiniband/uverbs{i}",
            permissions=["READ", "WRITE", "MKNOD"],
        )
        for i in range(efa_interface_count(instance_type))
    ]


def torchrun_command(
    script: str, processes_per_node: int, *, launcher: Sequence[str] = ("torchrun",), script_args: Sequence[str] = ()
) -> list[str]:
    """The container command: torchrun (or `launcher`, which takes torchrun's arguments) with Batch's MNP
    variables (the main node has no MAIN_NODE address), then the script and `script_args` (see `shell_word`)."""
    return [
        "bash",
        "-c",
        f"exec {' '.join(shlex.quote(word) for word in launcher)} "
        "--nnodes=${AWS_BATCH_JOB_NUM_NODES} --node_rank=${AWS_BATCH_JOB_NODE_INDEX} "
        f"--nproc_per_node={processes_per_node} --rdzv_conf=timeout={RENDEZVOUS_TIMEOUT_SECONDS} "
        "--master_addr=${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-$(hostname -i | cut -d' ' -f1)} "
        f"--master_port={TORCHRUN_PORT} {' '.join(shell_word(arg) for arg in (script, *script_args))}",
    ]


class BatchMultiNodeTraining(Construct):
    """Compute environment, launch template, job queue, multi-node job definition and job log group.

    Props (keyword):
    - `name`: suffix of the queue and job definition names.
    - `subnet`, `efa`: the one subnet and the EFA networking (security group, placement group or None).
    - `vpc_default_security_group_id`: the VPC's default group, the group of every container's interface (see the
      module docstring); this construct adds node-to-node TCP and HTTPS out to it.
    - `security_groups`: more groups on every interface, e.g. one with outbound access (default none).
    - `key`: encrypts the root volume and the log group.
    - `instance_type`: EC2 name; `max_nodes`: compute environment ceiling (max vCPUs = nodes x vCPUs).
    - `nodes`: nodes per job (default `max_nodes`); `image`, `script`: the container and torchrun entry point
      (default `DEFAULT_SCRIPT`, the reference script in the image runtime/containers/train.Dockerfile builds).
    - `launcher` (default `torchrun`), `script_args` (default none): see `torchrun_command`; `retry_attempts`
      (default 1, at most 10) and `exit_codes` that end a job without retry (default none): see `retry_strategy`.
    - `capacity_reservation_id`, `capacity_block`: launch into an ODCR or a Capacity Block (default on-demand).
    - `fsx_dns_name`, `fsx_mount_name`: FSx for Lustre mounted at /fsx on the host and in the container.
    - `image_type`: Batch ECS AMI type (default `ECS_AL2023_NVIDIA`, the Amazon Linux 2023 GPU AMI; Amazon Linux 2
      is past its end of support).
    - `root_volume_gib` (default 200), `shared_memory_mib` (default 49152), `log_retention` (default 90 days),
      `queue_priority` (default 1), `removal_policy` of the log group (default `RETAINED`).
    - `update_job_timeout_minutes`: how long a launch-template, AMI or user-data update lets a running job go on
      before Batch replaces its instances (default `UPDATE_JOB_TIMEOUT_MINUTES`, the maximum); jobs are never
      terminated at the start of an update.
    - `stop_timeout_s`: SIGTERM to SIGKILL of a stopped job's container (the ECS agent's, set in the user data), and
      the launcher's window for its workers 30 s less (TORCH_ELASTIC_SHUTDOWN_TIMEOUT); default None: the agent's
      30 s and torchrun's own.
    - `host_agent`: the CloudWatch agent's configuration, namespace and kernel-log group (default none: no agent):
      a user-data part installs it, the instance role may publish to that namespace and log group only.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        subnet: ec2.ISubnet,
        efa: EfaNetworking,
        vpc_default_security_group_id: str,
        key: kms.IKey,
        instance_type: str,
        max_nodes: int,
        image: str,
        security_groups: Sequence[ec2.ISecurityGroup] = (),
        nodes: int | None = None,
        script: str = DEFAULT_SCRIPT,
        launcher: Sequence[str] = ("torchrun",),
        script_args: Sequence[str] = (),
        retry_attempts: int = 1,
        exit_codes: Sequence[int] = (),
        capacity_reservation_id: str | None = None,
        capacity_block: bool = False,
        fsx_dns_name: str | None = None,
        fsx_mount_name: str | None = None,
        image_type: ImageType = "ECS_AL2023_NVIDIA",
        root_volume_gib: int = 200,
        shared_memory_mib: int = 49152,
        log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
        queue_priority: int = 1,
        removal_policy: RemovalPolicy = RETAINED,
        update_job_timeout_minutes: int = UPDATE_JOB_TIMEOUT_MINUTES,
        stop_timeout_s: int | None = None,
        host_agent: HostAgent | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if stop_timeout_s is not None and stop_timeout_s <= 30:
            raise ValueError(f"stop_timeout_s must be above 30 (the launcher gets 30 s less), got {stop_timeout_s}")
        self.stop_timeout_s = stop_timeout_s
        if capacity_block and capacity_reservation_id is None:
            raise ValueError("capacity_block needs capacity_reservation_id (the Capacity Block's cr-... ID)")
        if efa.placement_group is not None and capacity_reservation_id is not None:
            raise ValueError("a placement group cannot be combined with a reservation: build EfaNetworking without one")
        if not 1 <= update_job_timeout_minutes <= UPDATE_JOB_TIMEOUT_MINUTES:
            raise ValueError(
                f"update_job_timeout_minutes must be 1 to {UPDATE_JOB_TIMEOUT_MINUTES} (the Batch API's range), "
                f"got {update_job_timeout_minutes}"
            )
        it = get_instance(instance_type)
        self.instance_type = it.name
        self.nodes = nodes or max_nodes
        self.task_security_group = self._task_security_group(vpc_default_security_group_id)

        hosts = container_instances(
            self,
            efa=efa,
            instance_type=it.name,
            security_group_ids=[g.security_group_id for g in security_groups],
            key=key,
            root_volume_gib=root_volume_gib,
            fsx_path=FSX_PATH,
            fsx_dns_name=fsx_dns_name,
            fsx_mount_name=fsx_mount_name,
            stop_timeout_s=stop_timeout_s,
            host_agent=host_agent,
            capacity_reservation_id=capacity_reservation_id,
            capacity_block=capacity_block,
        )
        self.instance_role, self.launch_template = hosts.role, hosts.launch_template
        profile = hosts.profile
        # Construct id "Compute" (was "ComputeEnvironment" with BEST_FIT): a compute environment cannot change its
        # strategy from BEST_FIT in place, so a stack deployed before gets a new one; CloudFormation moves the
        # queue to it and deletes the old one.
        self.compute_environment = batch.CfnComputeEnvironment(
            self,
            "Compute",
            type="MANAGED",
            state="ENABLED",
            replace_compute_environment=False,
            compute_resources=batch.CfnComputeEnvironment.ComputeResourcesProperty(
                type="EC2",
                allocation_strategy=ALLOCATION_STRATEGY,
                minv_cpus=0,
                maxv_cpus=max_nodes * it.vcpus,
                instance_types=[it.name],
                subnets=[subnet.subnet_id],
                instance_role=profile.attr_arn,
                launch_template=batch.CfnComputeEnvironment.LaunchTemplateSpecificationProperty(
                    launch_template_id=self.launch_template.ref,
                    version=self.launch_template.attr_latest_version_number,
                ),
                placement_group=efa.placement_group.placement_group_name if efa.placement_group else None,
                ec2_configuration=[batch.CfnComputeEnvironment.Ec2ConfigurationObjectProperty(image_type=image_type)],
            ),
            # An infrastructure update (the launch template's version, the AMI) replaces the instances; running
            # jobs keep going for up to `update_job_timeout_minutes` first instead of the API default of 30.
            update_policy=batch.CfnComputeEnvironment.UpdatePolicyProperty(
                terminate_jobs_on_update=False, job_execution_timeout_minutes=update_job_timeout_minutes
            ),
        )
        self.job_queue = batch.CfnJobQueue(
            self,
            "JobQueue",
            job_queue_name=f"{Stack.of(self).stack_name}-{name}",
            priority=queue_priority,
            state="ENABLED",
            compute_environment_order=[
                batch.CfnJobQueue.ComputeEnvironmentOrderProperty(
                    order=1, compute_environment=self.compute_environment.ref
                )
            ],
        )
        self.log_group = logs.LogGroup(
            self, "JobLogs", retention=log_retention, encryption_key=key, removal_policy=removal_policy
        )
        skip_guard(
            self.log_group,
            {
                "CT.CLOUDWATCH.PR.2": "job logs are kept `log_retention` (default 90 days): step lines of long runs "
                "are a cost, and checkpoints and results live on FSx/S3, not in the log",
            },
        )
        self.job_role = iam.Role(
            self,
            "JobRole",
            # Only this account's ECS tasks (Batch runs them in its ECS cluster here): the confused-deputy guard of
            # the Amazon ECS Developer Guide, "Amazon ECS task IAM role" (aws:SourceAccount in the trust policy).
            assumed_by=iam.ServicePrincipal(
                "ecs-tasks.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}
            ),
            description="Training containers: no permissions until you grant some (e.g. read a dataset bucket)",
        )
        self.job_definition = batch.CfnJobDefinition(
            self,
            "JobDefinition",
            type="multinode",
            job_definition_name=f"{Stack.of(self).stack_name}-{name}",
            platform_capabilities=["EC2"],
            node_properties=batch.CfnJobDefinition.NodePropertiesProperty(
                main_node=0,
                num_nodes=self.nodes,
                node_range_properties=[
                    batch.CfnJobDefinition.NodeRangePropertyProperty(
                        target_nodes="0:",
                        container=self._container(
                            image, [script, *script_args], launcher, shared_memory_mib, fsx_dns_name
                        ),
                    )
                ],
            ),
            retry_strategy=retry_strategy(retry_attempts, exit_codes),
        )

    def _task_security_group(self, group_id: str) -> ec2.ISecurityGroup:
        """The VPC's default group, which every container's interface gets, with what a multi-node job needs.

        TCP only, and not the default group's own all-traffic self rule: the network stack's restriction of the
        default group revokes exactly that rule, so a rule of the same shape here could be taken away again.
        DNS (the VPC resolver) and the ECS credential endpoint need no rule: security groups do not filter
        traffic to the Amazon DNS server (Amazon VPC User Guide, "Security group rules"), and the credential
        endpoint is reached through the host. Lustre needs none either: the host mounts /fsx and the container
        bind-mounts it, so Lustre traffic uses the host's interfaces.
        """
        group = ec2.SecurityGroup.from_security_group_id(
            self, "TaskSecurityGroup", group_id, allow_all_outbound=False, mutable=True
        )
        group.add_ingress_rule(group, ec2.Port.all_tcp(), "multi-node job containers: rendezvous, NCCL bootstrap, ssh")
        group.add_egress_rule(group, ec2.Port.all_tcp(), "multi-node job containers: to the other nodes of the job")
        group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "multi-node job containers: HTTPS to VPC endpoints, S3, NAT"
        )
        return group

    def _container(
        self,
        image: str,
        script: Sequence[str],
        launcher: Sequence[str],
        shared_memory_mib: int,
        fsx_dns_name: str | None,
    ) -> batch.CfnJobDefinition.ContainerPropertiesProperty:
        it = get_instance(self.instance_type)
        gpus = it.accelerator.count if it.accelerator is not None and it.accelerator.kind == "gpu" else 0
        processes = it.accelerator.count if it.accelerator is not None else 1
        resources = [
            batch.CfnJobDefinition.ResourceRequirementProperty(type="VCPU", value=str(it.vcpus)),
            # The ECS agent and the OS keep part of the memory: ask for 90 % of the instance's.
            batch.CfnJobDefinition.ResourceRequirementProperty(
                type="MEMORY", value=str(int(it.memory_gib * 1024 * 0.9))
            ),
        ]
        if gpus:
            resources.append(batch.CfnJobDefinition.ResourceRequirementProperty(type="GPU", value=str(gpus)))
        volumes = []
        mounts = []
        if fsx_dns_name is not None:
            host = batch.CfnJobDefinition.VolumesHostProperty(source_path=FSX_PATH)
            volumes.append(batch.CfnJobDefinition.VolumesProperty(name="fsx", host=host))
            mounts.append(batch.CfnJobDefinition.MountPointsProperty(source_volume="fsx", container_path=FSX_PATH))
        return batch.CfnJobDefinition.ContainerPropertiesProperty(
            image=image,
            command=torchrun_command(script[0], processes, launcher=launcher, script_args=script[1:]),
            job_role_arn=self.job_role.role_arn,
            resource_requirements=resources,
            linux_parameters=batch.CfnJobDefinition.LinuxParametersProperty(
                devices=uverbs_devices(self.instance_type), shared_memory_size=shared_memory_mib
            ),
            ulimits=[
                batch.CfnJobDefinition.UlimitProperty(name="memlock", soft_limit=-1, hard_limit=-1),
                batch.CfnJobDefinition.UlimitProperty(name="stack", soft_limit=67108864, hard_limit=67108864),
                batch.CfnJobDefinition.UlimitProperty(name="nofile", soft_limit=1024000, hard_limit=1024000),
            ],
            # Only what aws-ofi-nccl's doc/efa-env-var.md still recommends for current plugin versions: no
            # FI_PROVIDER (plugin <= 1.5 only) and no FI_EFA_USE_DEVICE_RDMA (aborts on GPUs without RDMA read,
            # aws/aws-ofi-nccl#981). AWS_REGION: the containers cannot ask IMDS (host_setup.sh blocks it).
            # NCCL_SOCKET_IFNAME: an awsvpc container has its ENI (ethN) and `ecs-eth0`, a link-local interface to
            # the ECS credential endpoint (169.254.172.0/22, aws/amazon-ecs-agent#1230), which NCCL's default
            # choice (any interface but lo and docker*) may pick for its bootstrap; other nodes cannot reach it.
            environment=[
                batch.CfnJobDefinition.EnvironmentProperty(name="NCCL_DEBUG", value="WARN"),
                batch.CfnJobDefinition.EnvironmentProperty(name="NCCL_SOCKET_IFNAME", value=NCCL_SOCKET_IFNAME),
                batch.CfnJobDefinition.EnvironmentProperty(name="AWS_REGION", value=Aws.REGION),
                # The launcher's window for its workers on SIGTERM, inside the agent's stop timeout.
                *(
                    [
                        batch.CfnJobDefinition.EnvironmentProperty(
                            name="TORCH_ELASTIC_SHUTDOWN_TIMEOUT", value=str(self.stop_timeout_s - 30)
                        )
                    ]
                    if self.stop_timeout_s is not None
                    else []
                ),
            ],
            volumes=volumes or None,
            mount_points=mounts or None,
            log_configuration=batch.CfnJobDefinition.LogConfigurationProperty(
                log_driver="awslogs",
                options={
                    "awslogs-group": self.log_group.log_group_name,
                    "awslogs-region": Aws.REGION,
                    "awslogs-stream-prefix": "train",
                },
            ),
            privileged=False,
            readonly_root_filesystem=False,
        )
