"""nccl-tests on AWS Batch: a shell script that registers a multi-node job definition next to the training one
and submits it to the blueprint's job queue.

The job definition copies what the training job definition gives every node (the instance's vCPUs, 90 % of its
memory, every GPU, one `/dev/infiniband/uverbsN` per EFA, the ulimits EFA needs, /dev/shm, /fsx from the host,
the job role, the KMS-encrypted log group) and runs `runtime/batch/nccl_tests_node.sh` on every node. That script
exchanges a per-job SSH key and the node list through /fsx, so the blueprint needs `training.fsx`. The log group
and the job role come from the deployed TrainingClusterStack's outputs, read with the AWS CLI when the script runs.
"""

from __future__ import annotations

import json
from typing import Any

from mlstack import resources
from mlstack.catalog import efa_interface_count
from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.config.training_engines import BatchConfig
from mlstack.errors import InputError
from mlstack.workloads.nccl import ALL_REDUCE_ARGS, acceptance_groups, acceptance_nodes

NODE_SCRIPT = resources.runtime_path("batch", "nccl_tests_node.sh")
STACK_ID = "TrainingClusterStack"
NCCL_SOCKET_IFNAME = "^lo,docker,ecs"
"""As the training job definition (mlstack.constructs.training.batch): not the ECS agent's link-local `ecs-eth0`."""


def stack_name(config: BlueprintConfig) -> str:
    return f"{config.name}-{STACK_ID}"


def job_definition(config: BlueprintConfig, group: NodeGroupConfig, image: str) -> dict[str, Any]:
    """`aws batch register-job-definition --cli-input-json` input; @LOG_GROUP@ and @JOB_ROLE@ filled at run time."""
    assert config.training is not None
    settings = config.training.batch or BatchConfig()
    it = group.instance
    assert it.accelerator is not None
    gpus = it.accelerator.count
    devices = [
        {"hostPath": f"/dev/infiniband/uverbs{i}", "containerPath": f"/dev/infiniband/uverbs{i}",
         "permissions": ["READ", "WRITE", "MKNOD"]}
        for i in range(efa_interface_count(it.name))
    ]  # fmt: skip
    container = {
        "image": image,
        "command": ["bash", "-c", NODE_SCRIPT.read_text(encoding="utf-8")],
        "jobRoleArn": "@JOB_ROLE@",
        "resourceRequirements": [
            {"type": "VCPU", "value": str(it.vcpus)},
            {"type": "MEMORY", "value": str(int(it.memory_gib * 1024 * 0.9))},
            {"type": "GPU", "value": str(gpus)},
        ],
        "linuxParameters": {"devices": devices, "sharedMemorySize": settings.shared_memory_mib},
        "ulimits": [
            {"name": "memlock", "softLimit": -1, "hardLimit": -1},
            {"name": "stack", "softLimit": 67108864, "hardLimit": 67108864},
            {"name": "nofile", "softLimit": 1024000, "hardLimit": 1024000},
        ],
        "environment": [
            {"name": "GPUS_PER_NODE", "value": str(gpus)},
            {"name": "ALL_REDUCE_ARGS", "value": " ".join(ALL_REDUCE_ARGS)},
            {"name": "AWS_REGION", "value": config.env.region},
            {"name": "NCCL_SOCKET_IFNAME", "value": NCCL_SOCKET_IFNAME},
        ],
        "volumes": [{"name": "fsx", "host": {"sourcePath": "/fsx"}}],
        "mountPoints": [{"sourceVolume": "fsx", "containerPath": "/fsx"}],
        "logConfiguration": {
            "logDriver": "awslogs",
            "options": {
                "awslogs-group": "@LOG_GROUP@",
                "awslogs-region": config.env.region,
                "awslogs-stream-prefix": "nccl-tests",
            },
        },
        "privileged": False,
    }
    return {
        "jobDefinitionName": f"{stack_name(config)}-nccl-tests-{group.name}",
        "type": "multinode",
        "platformCapabilities": ["EC2"],
        "nodeProperties": {
            "mainNode": 0,
            "numNodes": acceptance_nodes(config, group),
            "nodeRangeProperties": [{"targetNodes": "0:", "container": container}],
        },
        "retryStrategy": {"attempts": 1},
        "timeout": {"attemptDurationSeconds": 3600},
    }


def render_group(config: BlueprintConfig, group: NodeGroupConfig, image: str) -> str:
    """The shell script: read the stack outputs, register the job definition, submit the job, say what next."""
    assert config.training is not None
    if config.training.fsx is None:
        raise InputError(
            f"blueprint {config.name!r}: the Batch nccl-tests job shares its SSH key and node list through /fsx; "
            "add training.fsx"
        )
    settings = config.training.batch or BatchConfig()
    stack = stack_name(config)
    region = config.env.region
    definition = json.dumps(job_definition(config, group, image), indent=2)
    job_name = f"nccl-tests-{group.name}"

    def output(key: str) -> str:
        query = f"Stacks[0].Outputs[?OutputKey=='{key}'].OutputValue"
        return (
            f'aws cloudformation describe-stacks --region {region} --stack-name {stack} --query "{query}" --output text'
        )

    return f"""#!/bin/bash
# nccl-tests all_reduce_perf over {acceptance_nodes(config, group)} {group.instance.name} nodes of AWS Batch
# (blueprint {config.name}; rendered by `mlstack acceptance {config.name}`). Run with AWS credentials for the account.
set -euo pipefail
log_group=$({output("BatchJobLogGroup")})
job_role=$({output("BatchJobRoleArn")})
definition=$(mktemp)
cat >"$definition" <<'JSON'
{definition}
JSON
sed -i -e "s|@LOG_GROUP@|$log_group|" -e "s|@JOB_ROLE@|$job_role|" "$definition"
aws batch register-job-definition --region {region} --cli-input-json "file://$definition" >/dev/null
job_id=$(aws batch submit-job --region {region} --job-queue {stack}-{settings.name} \\
  --job-definition {stack}-nccl-tests-{group.name} --job-name {job_name} --query jobId --output text)
echo "submitted $job_id; when 'aws batch describe-jobs --region {region} --jobs $job_id' says SUCCEEDED or FAILED:"
echo "  stream=\\$(aws batch describe-jobs --region {region} --jobs '$job_id#0' \\\\"
echo "    --query 'jobs[0].container.logStreamName' --output text)"
echo "  aws logs tail '$log_group' --region {region} --log-stream-names \\"\\$stream\\" --since 1d > {job_name}.log"
echo "  mlstack nccl-check {job_name}.log --instance-type {group.instance.name}"
"""


def render(config: BlueprintConfig, image: str) -> dict[str, str]:
    """File name -> shell script, per acceptance group."""
    return {f"nccl-tests-{g.name}.sh": render_group(config, g, image) for g in acceptance_groups(config)}
