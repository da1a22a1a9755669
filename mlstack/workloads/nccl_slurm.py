"""nccl-tests on HyperPod Slurm: an `sbatch` script per acceptance node group.

The script asks for every worker of the group (its partition is the group's name, as the lifecycle scripts'
provisioning parameters name it), one task per GPU, whole nodes. It finds `all_reduce_perf` on the nodes, or
builds NVIDIA's nccl-tests once into /fsx (shared by every node) against the AMI's CUDA, NCCL and Open MPI, then
runs it with `mpirun` over the allocation, as the awsome-distributed-training nccl-tests Slurm scripts do.
Where the HyperPod AMI keeps CUDA, NCCL, Open MPI and the aws-ofi-nccl plugin (`/usr/local/cuda`,
`/opt/amazon/openmpi`, `/opt/amazon/ofi-nccl` or `/opt/aws-ofi-nccl`) cannot be checked offline: each is an
environment variable the user can override at `sbatch` time.
"""

from __future__ import annotations

from mlstack.config import BlueprintConfig
from mlstack.config.training import NodeGroupConfig
from mlstack.workloads.nccl import ALL_REDUCE_ARGS, NCCL_TESTS_VERSION, acceptance_groups, acceptance_nodes

FSX_DIR = "/fsx/nccl-tests"


def script_name(group: NodeGroupConfig) -> str:
    return f"nccl-tests-{group.name}.sbatch"


def render_group(config: BlueprintConfig, group: NodeGroupConfig) -> str:
    """The sbatch script for one group: `group.desired_size` nodes (HyperPod's instance count) x its GPUs."""
    it = group.instance
    assert it.accelerator is not None
    gpus = it.accelerator.count
    nodes = acceptance_nodes(config, group)
    args = " ".join(ALL_REDUCE_ARGS)
    job = f"nccl-tests-{group.name}"
    return f"""#!/bin/bash
# nccl-tests all_reduce_perf over every GPU of the {nodes} {it.name} workers of node group {group.name}
# (blueprint {config.name}; rendered by `mlstack acceptance {config.name}`).
# On the controller or login node: sbatch {script_name(group)}
# Then: mlstack nccl-check {job}-<job id>.out --instance-type {it.name}
#SBATCH --job-name={job}
#SBATCH --partition={group.name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={gpus}
#SBATCH --exclusive
#SBATCH --output=%x-%j.out
set -euo pipefail

CUDA_HOME=${{CUDA_HOME:-/usr/local/cuda}}
NCCL_HOME=${{NCCL_HOME:-$CUDA_HOME}}
MPI_HOME=${{MPI_HOME:-/opt/amazon/openmpi}}
NCCL_TESTS_DIR=${{NCCL_TESTS_DIR:-{FSX_DIR}}}
export LD_LIBRARY_PATH="$NCCL_HOME/lib:$CUDA_HOME/lib64:$MPI_HOME/lib:/opt/amazon/efa/lib:\\
/opt/amazon/ofi-nccl/lib:/opt/aws-ofi-nccl/lib:${{LD_LIBRARY_PATH:-}}"

binary=${{ALL_REDUCE_PERF:-$NCCL_TESTS_DIR/build/all_reduce_perf}}
if [ ! -x "$binary" ]; then
  # Built once, on one node, into the shared file system every worker mounts.
  srun --nodes=1 --ntasks=1 bash -c "set -euo pipefail
    rm -rf '$NCCL_TESTS_DIR'
    git clone --depth 1 --branch {NCCL_TESTS_VERSION} https://github.com/NVIDIA/nccl-tests '$NCCL_TESTS_DIR'
    make -C '$NCCL_TESTS_DIR' -j 16 MPI=1 MPI_HOME='$MPI_HOME' CUDA_HOME='$CUDA_HOME' NCCL_HOME='$NCCL_HOME'"
fi

"$MPI_HOME/bin/mpirun" -n $(({gpus} * SLURM_JOB_NUM_NODES)) -N {gpus} --bind-to none \\
  -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=INFO \\
  "$binary" {args}
"""


def render(config: BlueprintConfig) -> dict[str, str]:
    """File name -> sbatch script, per acceptance group."""
    return {script_name(g): render_group(config, g) for g in acceptance_groups(config)}
