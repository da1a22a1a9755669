"""EFA acceptance test: the nccl-tests job rendered per node group and the parser of its output.

The sample logs in data/ are illustrative: the layout of all_reduce_perf output, not measurements.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.cli import main
from mlstack.config import load
from mlstack.errors import InputError
from mlstack.workloads import nccl, nccl_batch, nccl_k8s
from tests.training.test_config import BASE

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def _pods(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {j["name"]: j["template"]["spec"]["template"]["spec"] for j in jobs}


def test_p5_acceptance_job_runs_all_reduce_across_every_node_and_gpu_over_all_efa_interfaces() -> None:
    runtime, job = nccl_k8s.render(load("eks-gpu-training"), "img:1")
    assert runtime["kind"] == "TrainingRuntime" and job["kind"] == "TrainJob"
    assert runtime["spec"]["mlPolicy"] == {
        "numNodes": 4,
        "mpi": {"numProcPerNode": 8, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/home/mpiuser/.ssh"},
    }
    pods = _pods(runtime)
    launcher = pods["launcher"]["containers"][0]["command"]
    assert launcher[:6] == ["mpirun", "-np", "32", "-npernode", "8", "--bind-to"]
    assert "/opt/nccl-tests/build/all_reduce_perf" in launcher and launcher[-6:] == ["-g", "1", "-c", "1", "-n", "20"]
    assert "NCCL_DEBUG=INFO" in launcher  # the log must show the network plugin NCCL chose
    node = pods["node"]["containers"][0]
    assert node["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert node["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert node["resources"]["limits"]["hugepages-2Mi"] == "5120Mi"
    assert pods["node"]["nodeSelector"] == {"mlstack.aws/node-group": "p5"} or pods["node"]["nodeSelector"]
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "nccl-tests-p5"
    assert job["spec"]["trainer"]["numNodes"] == 4


def test_mpi_job_uses_the_trainers_ssh_keys_as_mpiuser_and_waits_for_every_node() -> None:
    """As kubeflow/trainer's own MPI runtimes: keys from the Trainer's Secret at sshAuthMountPath (read by uid 1000
    through fsGroup), a non-root sshd on 2222 with a readiness probe, and the launcher after every node is Ready."""
    (runtime, _) = nccl_k8s.render(load("eks-gpu-training"), "img:1")
    spec = runtime["spec"]["template"]["spec"]
    jobs = {j["name"]: j for j in spec["replicatedJobs"]}
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert spec["network"] == {"publishNotReadyAddresses": True}
    pods = _pods(runtime)
    for name in ("node", "launcher"):
        assert pods[name]["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
        assert pods[name]["containers"][0]["name"] == "node"  # the container the MPI plugin mounts the keys into
    node = pods["node"]["containers"][0]
    assert [node["command"][0], *node["args"]] == ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
    assert node["readinessProbe"]["tcpSocket"] == {"port": 2222}
    assert "--allow-run-as-root" not in pods["launcher"]["containers"][0]["command"]
    dockerfile = (ROOT / "runtime/containers/nccl-tests.Dockerfile").read_text()
    assert "useradd -m -u 1000" in dockerfile and "Port 2222" in dockerfile
    assert "HostKey /home/mpiuser/.ssh/id_rsa" in dockerfile  # the Trainer's key, mounted per job
    assert "ssh-keygen" not in dockerfile and "COPY" not in dockerfile  # no key is baked into the image


def test_neuron_and_single_node_groups_get_no_nccl_tests_job(tmp_path: Path) -> None:
    assert nccl_k8s.render(load("eks-trn1-training"), "i") == []
    data = copy.deepcopy(BASE)
    for group in data["training"]["node_groups"]:
        group["max_size"] = 1
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    assert nccl_k8s.render(load(path), "i") == []


def test_cli_prints_the_manifest_and_refuses_a_blueprint_without_a_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acceptance", "eks-gpu-training", "--image", "acct.dkr.ecr.us-east-1.amazonaws.com/nccl:1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["TrainingRuntime", "TrainJob"]
    assert _pods(docs[0])["node"]["containers"][0]["image"] == "acct.dkr.ecr.us-east-1.amazonaws.com/nccl:1"
    assert main(["acceptance", "eks-trn1-training"]) == 2
    assert "no GPU node group with EFA" in capsys.readouterr().err


def test_parser_reads_rows_average_and_the_efa_provider() -> None:
    result = nccl.parse((DATA / "all_reduce_perf_2node_efa.txt").read_text())
    assert len(result.rows) == 31 and result.rows[-1].size == 8 * 2**30
    assert result.rows[-1].busbw_out == 319.69 and result.rows[-1].busbw_in == 316.52
    assert result.avg_busbw == 95.4211 and result.out_of_bounds == 0
    assert result.provider == "efa" and not result.sockets


def test_healthy_log_passes_and_reports_the_fraction_of_the_efa_line_rate() -> None:
    result = nccl.parse((DATA / "all_reduce_perf_2node_efa.txt").read_text())
    v = nccl.verdict(result, instance_type="p5.48xlarge", expected_gbytes=300)
    assert v.passed and v.busbw == 319.69 and v.line_rate == 400.0
    assert v.summary().startswith("PASS: busbw 319.69 GB/s at the largest size; 80% of the 400 GB/s EFA line rate")
    assert not nccl.verdict(result, instance_type="p5.48xlarge", expected_gbytes=330).passed


def test_socket_fallback_and_wrong_values_fail_with_each_reason() -> None:
    result = nccl.parse((DATA / "all_reduce_perf_2node_sockets.txt").read_text())
    assert result.provider is None and result.sockets
    v = nccl.verdict(result, instance_type="p5.48xlarge")
    assert not v.passed
    assert [r.split(" ")[0] for r in v.reasons] == ["3", "3", "NCCL"]
    assert "did not use EFA" in v.summary()


def test_no_expectation_known_means_speed_is_not_judged() -> None:
    assert "p5.48xlarge" not in nccl.EXPECTED_BUSBW_GBYTES
    result = nccl.parse((DATA / "all_reduce_perf_2node_efa.txt").read_text())
    v = nccl.verdict(result, instance_type="p5.48xlarge")
    assert v.passed and v.expected is None


def test_nccl_check_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = str(DATA / "all_reduce_perf_2node_efa.txt")
    assert main(["nccl-check", ok, "--instance-type", "p5.48xlarge", "--expect-gbytes", "300"]) == 0
    assert main(["nccl-check", str(DATA / "all_reduce_perf_2node_sockets.txt"), "--instance-type", "p5.48xlarge"]) == 1
    empty = tmp_path / "empty.log"
    empty.write_text("mpirun: connection refused\n")
    assert main(["nccl-check", str(empty), "--instance-type", "p5.48xlarge"]) == 2
    assert "no nccl-tests result rows found" in capsys.readouterr().err


def test_parse_rejects_text_without_rows() -> None:
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        nccl.parse("# nThread 1 nGpus 1\n")


# ------------------------------------------------------------------------------------------- engines other than EKS


def test_slurm_acceptance_is_an_sbatch_over_every_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acceptance", "hyperpod-slurm-training"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#!/bin/bash\n") and "kind:" not in script
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=nccl-tests-p5",
        "#SBATCH --partition=p5",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    path = tmp_path / "nccl.sbatch"
    path.write_text(script)
    result = subprocess.run([_shellcheck(), "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    # Run it with stub srun/mpirun/git/make: it builds nccl-tests once into the shared dir, then runs mpirun
    # over 8 tasks x SLURM_JOB_NUM_NODES.
    calls = tmp_path / "calls"
    bin_dir = _stubs(
        tmp_path,
        {
            "srun": f'echo "srun $1 $2" >>"{calls}"; shift 2; "$@"',
            "git": f'echo "git $*" >>"{calls}"; mkdir -p "${{@: -1}}"',
            "make": f'echo "make $*" >>"{calls}"; mkdir -p "$2/build"; touch "$2/build/all_reduce_perf"; '
            'chmod +x "$2/build/all_reduce_perf"',
            "mpirun": f'echo "mpirun $*" >>"{calls}"',
        },
    )
    mpi_home = tmp_path / "mpi"
    (mpi_home / "bin").mkdir(parents=True)
    (mpi_home / "bin" / "mpirun").symlink_to(bin_dir / "mpirun")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NUM_NODES": "2", "MPI_HOME": str(mpi_home),
           "NCCL_TESTS_DIR": str(tmp_path / "fsx" / "nccl-tests")}  # fmt: skip
    for _ in range(2):  # the second run finds the build and only runs mpirun
        subprocess.run(["bash", str(path)], env=env, check=True)
    lines = calls.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["srun", "git", "make", "mpirun", "mpirun"]
    assert "--branch v2.16.4" in lines[1] and "MPI=1" in lines[2]
    assert lines[3].startswith("mpirun -n 16 -N 8 --bind-to none") and "NCCL_DEBUG=INFO" in lines[3]
    assert lines[3].endswith("all_reduce_perf -b 8 -e 8G -f 2 -g 1 -c 1 -n 20")


def test_batch_acceptance_registers_a_multinode_job_definition_and_submits_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["acceptance", "batch-training"]) == 2
    assert "--image" in capsys.readouterr().err
    assert main(["acceptance", "batch-training", "--image", "acct.dkr.ecr.us-east-1.amazonaws.com/nccl:1"]) == 0
    script = capsys.readouterr().out
    path = tmp_path / "nccl.sh"
    path.write_text(script)
    result = subprocess.run([_shellcheck(), "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    calls = tmp_path / "calls"
    saved = tmp_path / "definition.json"
    aws = (
        f'echo "aws $*" >>"{calls}"; case "$1 $2" in '
        '"cloudformation describe-stacks") case "$*" in *BatchJobLogGroup*) echo lg-1;; *) echo arn:role;; esac;; '
        f'"batch register-job-definition") cp "${{@: -1}}" /dev/null; cp "${{6#file://}}" "{saved}";; '
        '"batch submit-job") echo job-1;; esac'
    )
    bin_dir = _stubs(tmp_path, {"aws": aws})
    subprocess.run(["bash", str(path)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True, capture_output=True)
    lines = calls.read_text().splitlines()
    assert "--stack-name batch-training-TrainingClusterStack" in lines[0]
    submit = next(line for line in lines if line.startswith("aws batch submit-job"))
    assert "--job-queue batch-training-TrainingClusterStack-train" in submit
    assert "--job-definition batch-training-TrainingClusterStack-nccl-tests-p5" in submit
    definition = json.loads(saved.read_text())
    assert definition["type"] == "multinode" and definition["nodeProperties"]["numNodes"] == 2
    container = definition["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert container["jobRoleArn"] == "arn:role" and container["logConfiguration"]["options"]["awslogs-group"] == "lg-1"
    assert container["image"] == "acct.dkr.ecr.us-east-1.amazonaws.com/nccl:1"
    assert len(container["linuxParameters"]["devices"]) == 32
    assert {"type": "GPU", "value": "8"} in container["resourceRequirements"]
    assert container["mountPoints"] == [{"sourceVolume": "fsx", "containerPath": "/fsx"}]
    assert "mpirun" in container["command"][2]


def test_batch_node_script_runs_main_and_worker_through_the_shared_directory(tmp_path: Path) -> None:
    """Two 'nodes' of one job on this machine: the worker waits for the main node's key, starts sshd and
    registers; the main node writes the hostfile of both and runs mpirun with the job's key, then cleans up."""
    from mlstack.workloads.nccl_batch import NODE_SCRIPT

    calls = tmp_path / "calls"
    bin_dir = _stubs(tmp_path, {
        "hostname": 'echo "169.254.172.3 10.0.0.$NODE_IP "',  # hostname -I: ecs-eth0 first
        "ssh-keygen": f'echo "ssh-keygen $*" >>"{calls}"; '
        'case "$*" in *-f*) f="${@: -1}"; touch "$f" "$f.pub";; esac',
        "sshd": f'echo "sshd $*" >>"{calls}"',
        "mpirun": f'echo "mpirun $*" >>"{calls}"; cat "$3" >>"{calls}"',
        "sleep": 'case "$1" in infinity) exit 0;; *) /bin/sleep 0.2;; esac',
    })  # fmt: skip
    root = tmp_path / "root"
    script = NODE_SCRIPT.read_text().replace("/root/.ssh", str(root / ".ssh")).replace("/run/sshd", str(tmp_path))
    script = script.replace("/usr/sbin/sshd", str(bin_dir / "sshd"))
    common = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GPUS_PER_NODE": "8", "ALL_REDUCE_ARGS": "-b 8 -e 8G",
              "AWS_BATCH_JOB_ID": "abc#0", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", "AWS_BATCH_JOB_NUM_NODES": "2",
              "EXCHANGE_DIR": str(tmp_path / "fsx"), "MPIRUN": str(bin_dir / "mpirun"),
              "WAIT_SECONDS": "20"}  # fmt: skip
    worker = subprocess.Popen(["bash", "-c", script], env={**common, "AWS_BATCH_JOB_NODE_INDEX": "1", "NODE_IP": "2",
                              "AWS_BATCH_JOB_ID": "abc#1"})  # fmt: skip
    main_node = subprocess.run(["bash", "-c", script], env={**common, "AWS_BATCH_JOB_NODE_INDEX": "0", "NODE_IP": "1"},
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert worker.wait(timeout=60) == 0
    assert main_node.returncode == 0, main_node.stderr
    text = calls.read_text()
    assert "sshd -p 2222" in text
    assert "10.0.0.1 slots=8\n10.0.0.2 slots=8" in text
    mpirun = next(line for line in text.splitlines() if line.startswith("mpirun"))
    assert "-np 16 -npernode 8" in mpirun and "-p 2222 -i " in mpirun and mpirun.endswith("-b 8 -e 8G")
    assert "--mca oob_tcp_if_exclude lo,docker0,ecs-eth0 --mca btl_tcp_if_exclude lo,docker0,ecs-eth0" in mpirun
    assert (root / ".ssh" / "authorized_keys").exists()
    assert not (tmp_path / "fsx" / "abc").exists()  # the job's key is removed when mpirun ends


def test_batch_main_node_removes_the_key_when_a_node_never_registers(tmp_path: Path) -> None:
    """The main node times out waiting for the other node (set -e ends the script before mpirun): the job's
    private key must not stay on /fsx."""
    from mlstack.workloads.nccl_batch import NODE_SCRIPT

    bin_dir = _stubs(tmp_path, {
        "hostname": 'echo "10.0.0.1"',
        "ssh-keygen": 'case "$*" in *-f*) f="${@: -1}"; touch "$f" "$f.pub";; esac',
        "mpirun": "exit 0",
        "sleep": "/bin/sleep 0.2",
    })  # fmt: skip
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GPUS_PER_NODE": "8", "ALL_REDUCE_ARGS": "-b 8",
           "AWS_BATCH_JOB_ID": "abc#0", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", "AWS_BATCH_JOB_NUM_NODES": "2",
           "AWS_BATCH_JOB_NODE_INDEX": "0", "EXCHANGE_DIR": str(tmp_path / "fsx"), "MPIRUN": str(bin_dir / "mpirun"),
           "WAIT_SECONDS": "1"}  # fmt: skip
    result = subprocess.run(["bash", "-c", NODE_SCRIPT.read_text()], env=env, capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode != 0 and "timed out waiting for 2 nodes" in result.stderr
    assert not (tmp_path / "fsx" / "abc").exists()


# ------------------------------------------------------------------------------------------- log shapes


def _efa_sample() -> str:
    return (DATA / "all_reduce_perf_2node_efa.txt").read_text()


def _cloudwatch_json(text: str) -> str:
    events = [{"timestamp": 1764583200000 + i, "message": line, "ingestionTime": 1764583201000 + i}
              for i, line in enumerate(text.splitlines())]  # fmt: skip
    return json.dumps({"events": events, "nextForwardToken": "f/1", "nextBackwardToken": "b/1"}, indent=2)


SHAPES: dict[str, Callable[[str], str]] = {
    "slurm output": lambda t: "+ srun ...\n" + t,
    "cloudwatch get-log-events json": _cloudwatch_json,
    "aws logs tail": lambda t: "\n".join(
        f"2026-12-01T10:00:{i % 60:02d}.123000+00:00 nccl-tests/default/0a1b2c {line}"
        for i, line in enumerate(t.splitlines())
    ),
    "kubectl logs --prefix": lambda t: "\n".join(
        f"[pod/nccl-tests-p5-launcher-0-0-x7k2p/node] {line}" for line in t.splitlines()
    ),
    "mpirun --tag-output": lambda t: "\n".join(f"[1,0]<stdout>:{line}" for line in t.splitlines()),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_nccl_check_reads_every_engines_log_shape(shape: str, tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text(SHAPES[shape](_efa_sample()))
    result = nccl.parse(path.read_text())
    assert len(result.rows) == 31 and result.rows[-1].busbw_out == 319.69
    assert result.provider == "efa" and result.avg_busbw == 95.4211
    assert main(["nccl-check", str(path), "--instance-type", "p5.48xlarge", "--expect-gbytes", "300"]) == 0


def _shellcheck() -> str:
    return str(Path(sys.executable).with_name("shellcheck"))


def _stubs(tmp_path: Path, commands: dict[str, str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in commands.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_hyperpod_eks_acceptance_spans_the_instance_count(capsys: pytest.CaptureFixture[str]) -> None:
    config = load("hyperpod-eks-training")
    (group,) = nccl.acceptance_groups(config)
    assert main(["acceptance", "hyperpod-eks-training", "--image", "img:1"]) == 0
    runtime, job = list(yaml.safe_load_all(capsys.readouterr().out))
    assert job["spec"]["trainer"]["numNodes"] == runtime["spec"]["mlPolicy"]["numNodes"] == group.desired_size


def test_batch_acceptance_without_fsx_names_the_missing_section(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "blueprints" / "batch-training.yaml").read_text())
    data["training"]["fsx"] = None
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"shares its SSH key and node list through /fsx; add training.fsx"):
        nccl_batch.render(load(path), "img:1")
