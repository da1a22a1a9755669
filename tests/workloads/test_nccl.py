"""EFA acceptance test: the nccl-tests job rendered per node group and the parser of its output.

The sample logs in data/ are illustrative: the layout of all_reduce_perf output, not measurements.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlstack.cli import main
from mlstack.config import load
from mlstack.errors import InputError
from mlstack.workloads import nccl
from tests.training.test_config import BASE

DATA = Path(__file__).parent / "data"


def _pods(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {j["name"]: j["template"]["spec"]["template"]["spec"] for j in jobs}


def test_p5_acceptance_job_runs_all_reduce_across_every_node_and_gpu_over_all_efa_interfaces() -> None:
    runtime, job = nccl.render_acceptance(load("eks-gpu-training"))
    assert runtime["kind"] == "TrainingRuntime" and job["kind"] == "TrainJob"
    assert runtime["spec"]["mlPolicy"] == {
        "numNodes": 4,
        "mpi": {"numProcPerNode": 8, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/home/mpiuser/.ssh"},
    }
    pods = _pods(runtime)
    launcher = pods["launcher"]["containers"][0]["command"]
    assert launcher[:7] == ["mpirun", "--allow-run-as-root", "-np", "32", "-npernode", "8", "--bind-to"]
    assert "/opt/nccl-tests/build/all_reduce_perf" in launcher and launcher[-6:] == ["-g", "1", "-c", "1", "-n", "20"]
    assert "NCCL_DEBUG=INFO" in launcher  # the log must show the network plugin NCCL chose
    node = pods["node"]["containers"][0]
    assert node["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert node["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert node["resources"]["limits"]["hugepages-2Mi"] == "5120Mi"
    assert pods["node"]["nodeSelector"] == {"mlstack.aws/node-group": "p5"} or pods["node"]["nodeSelector"]
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "nccl-tests-p5"
    assert job["spec"]["trainer"]["numNodes"] == 4


def test_neuron_and_single_node_groups_get_no_nccl_tests_job(tmp_path: Path) -> None:
    assert nccl.render_acceptance(load("eks-trn1-training")) == []
    data = copy.deepcopy(BASE)
    for group in data["training"]["node_groups"]:
        group["max_size"] = 1
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    assert nccl.render_acceptance(load(path)) == []


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
