"""What each engine's job does on a failure: restart on infrastructure, fail on the script's own errors, resume
from the newest checkpoint on FSx (exported to S3 when the file system has a data repository).

The rendered Kubeflow Trainer documents are checked against the API types of the installed Trainer release
(kubeflow-trainer-api 2.3.0, the models generated from kubeflow/trainer v2.3.0 with JobSet v1alpha2 and
Kubernetes core/batch types): every field survives a round trip through them, so a misspelled or misplaced field
(which the API server would prune or reject) fails here.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from typing import Any

import pytest
from kubeflow_trainer_api.models import TrainerV1alpha1TrainingRuntime, TrainerV1alpha1TrainJob

from mlstack.config import BlueprintConfig, load
from mlstack.config.training_fsx import DataRepositoryConfig
from mlstack.k8s.job import render_job
from mlstack.workloads import resilience
from runtime.workloads import elastic
from tests.synth import Session

EKS = ("eks-gpu-training", "eks-p4d-training", "eks-g6e-training", "eks-trn1-training")

# JobSet v0.12.0 (the version the kubeflow-trainer 2.3.0 chart installs), api/jobset/v1alpha2/jobset_types.go and
# pkg/webhooks/jobset_webhook.go: the enums and checks the generated models do not carry.
JOBSET_ACTIONS = {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                  "RestartJobAndIgnoreMaxRestarts"}  # fmt: skip
JOBSET_RESTART_STRATEGIES = {"Recreate", "BlockingRecreate", "InPlaceRestart"}
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy"}  # fmt: skip
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# The Job controller's failure messages for the two pod failure policy rules (the examples of the JobSet KEP 262,
# "Configurable Failure Policy", and of the Kubernetes docs' pod failure policy task).
DISRUPTED = "Pod training/llm-pretrain-node-0-1-x7k2p has condition DisruptionTarget matching FailJob rule at index 1"
APP_ERROR = (
    "Container node for pod training/llm-pretrain-node-0-0-9fz4q failed with exit code 42 matching FailJob rule at "
    "index 0"
)
LOST_PEER = "Job has reached the specified backoff limit"


def _node_job(runtime: dict[str, Any]) -> dict[str, Any]:
    return dict(runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"])


def _round_trip(model: Any, doc: dict[str, Any]) -> dict[str, Any]:
    return dict(model.from_dict(copy.deepcopy(doc)).to_dict())


@pytest.mark.parametrize("name", EKS)
def test_rendered_trainer_documents_survive_the_trainer_api_types(name: str) -> None:
    runtime, job = render_job(load(name))
    assert _round_trip(TrainerV1alpha1TrainingRuntime, runtime) == runtime
    assert _round_trip(TrainerV1alpha1TrainJob, job) == job


def test_the_round_trip_catches_a_misplaced_field() -> None:
    runtime, _ = render_job(load("eks-gpu-training"))
    wrong = copy.deepcopy(runtime)
    wrong["spec"]["template"]["spec"]["podFailurePolicy"] = _node_job(runtime)["podFailurePolicy"]  # JobSet level
    assert _round_trip(TrainerV1alpha1TrainingRuntime, wrong) != wrong
    typo = copy.deepcopy(runtime)
    typo["spec"]["template"]["spec"]["failurePolicy"]["maxRestart"] = 3
    assert _round_trip(TrainerV1alpha1TrainingRuntime, typo) != typo


@pytest.mark.parametrize("name", EKS)
def test_jobset_failure_policy_uses_only_values_jobset_accepts(name: str) -> None:
    config = load(name)
    runtime, _ = render_job(config)
    policy = runtime["spec"]["template"]["spec"]["failurePolicy"]
    assert config.training is not None
    assert policy["maxRestarts"] == config.training.job.max_retries + resilience.DISRUPTION_RESTARTS
    assert policy["restartStrategy"] in JOBSET_RESTART_STRATEGIES
    names = [rule["name"] for rule in policy["rules"]]
    assert len(set(names)) == len(names) and all(RULE_NAME.match(n) for n in names)
    for rule in policy["rules"]:
        assert rule["action"] in JOBSET_ACTIONS and set(rule["onJobFailureReasons"]) <= JOB_FAILURE_REASONS
        for pattern in rule["onJobFailureMessagePatterns"]:
            re.compile(pattern)  # RE2 syntax; these use nothing RE2 lacks


def _first_rule(policy: dict[str, Any], reason: str, message: str) -> str:
    """The action JobSet takes for a failed Job (first matching rule; none: RestartJobSet, counted)."""
    for rule in policy["rules"]:
        reasons, patterns = rule.get("onJobFailureReasons", []), rule.get("onJobFailureMessagePatterns", [])
        if (not reasons or reason in reasons) and (not patterns or any(re.search(p, message) for p in patterns)):
            return str(rule["action"])
    return "RestartJobSet"


def test_a_disruption_restarts_counted_an_application_error_fails_anything_else_restarts_counted() -> None:
    runtime, _ = render_job(load("eks-gpu-training"))
    policy = runtime["spec"]["template"]["spec"]["failurePolicy"]
    # Every restart counts toward maxRestarts: a node drained again and again no longer restarts the job forever.
    assert _first_rule(policy, "PodFailurePolicy", DISRUPTED) == "RestartJobSet"
    assert not any(rule["action"].endswith("IgnoreMaxRestarts") for rule in policy["rules"])
    assert policy["maxRestarts"] == 3 + resilience.DISRUPTION_RESTARTS == 13  # job.max_retries 3
    assert _first_rule(policy, "PodFailurePolicy", APP_ERROR) == "FailJobSet"
    assert _first_rule(policy, "BackoffLimitExceeded", LOST_PEER) == "RestartJobSet"  # bounded by maxRestarts
    # The Job fails on its first failed pod and says which rule matched: exit code 42 first, then the condition.
    job = _node_job(runtime)
    assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"
    exit_rule, disruption_rule = job["podFailurePolicy"]["rules"]
    container = job["template"]["spec"]["containers"][0]["name"]
    assert exit_rule["onExitCodes"] == {"containerName": container, "operator": "In", "values": [42]}
    assert disruption_rule["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert {exit_rule["action"], disruption_rule["action"]} == {"FailJob"}
    assert resilience.APP_ERROR_EXIT == elastic.APP_ERROR_EXIT == 42  # what the launcher exits with


def test_shipped_job_runs_the_launcher_checkpoints_every_n_steps_and_keeps_k() -> None:
    runtime, _ = render_job(load("eks-gpu-training"))
    command = _node_job(runtime)["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", resilience.LAUNCHER] == ["python", "/opt/mlstack/runtime/workloads/elastic.py"]
    at = command.index("--checkpoint-dir")
    assert command[at : at + 7] == [
        "--checkpoint-dir", "/fsx/checkpoints/llm-pretrain", "--checkpoint-every", "100", "--keep-checkpoints", "3",
        "--resume",
    ]  # fmt: skip


@pytest.mark.parametrize("name", [*EKS, "hyperpod-eks-training"])
def test_job_pods_have_five_minutes_to_checkpoint_on_sigterm(name: str) -> None:
    # Kubernetes' default grace is 30 s and torchrun's wait for its ranks 30 s: a drained node (Capacity Block
    # expiry, budget scale-to-zero) killed the ranks before train.py could save the step in progress.
    docs = render_job(load(name))
    pods = [_node_job(docs[0])["template"]["spec"]] if name in EKS else [
        r["template"]["spec"] for r in docs[0]["spec"]["pytorchReplicaSpecs"].values()
    ]  # fmt: skip
    for pod in pods:
        assert pod["terminationGracePeriodSeconds"] == resilience.TERMINATION_GRACE_S == 300
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
        assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(resilience.SHUTDOWN_TIMEOUT_S) == "270"


def _with_repository(config: BlueprintConfig, **repo: Any) -> BlueprintConfig:
    training = config.training
    assert training is not None and training.fsx is not None
    fsx = training.fsx.model_copy(update={"data_repository": DataRepositoryConfig(bucket="my-bucket", **repo)})
    return config.model_copy(update={"training": training.model_copy(update={"fsx": fsx})})


def test_with_a_data_repository_checkpoints_go_below_its_path_so_they_are_exported() -> None:
    config = _with_repository(load("eks-gpu-training"), file_system_path="/data")
    runtime, _ = render_job(config)
    command = _node_job(runtime)["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--checkpoint-dir") + 1] == "/fsx/data/checkpoints/llm-pretrain"
    repo = config.training.fsx.data_repository  # type: ignore[union-attr]
    assert repo is not None and {"NEW", "CHANGED", "DELETED"} <= set(repo.export_events)  # pruning reaches S3 too


def test_hyperpod_eks_keeps_on_failure_for_auto_resume_and_bounds_in_place_restarts() -> None:
    config = load("hyperpod-eks-training")
    (job,) = render_job(config)
    assert config.training is not None
    assert job["spec"]["runPolicy"] == {"backoffLimit": config.training.job.max_retries}
    # Fields of the PyTorchJob CRD of the HyperPod dependencies chart (charts/training-operators/crds, at the
    # pinned aws/sagemaker-hyperpod-cli commit); restartPolicy OnFailure is what auto-resume requires.
    assert set(job["spec"]) <= {"elasticPolicy", "nprocPerNode", "pytorchReplicaSpecs", "runPolicy"}
    assert set(job["spec"]["runPolicy"]) <= {"activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy",
                                              "schedulingPolicy", "suspend", "ttlSecondsAfterFinished"}  # fmt: skip
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["restartPolicy"] == "OnFailure" and set(replica) == {"replicas", "restartPolicy", "template"}


@pytest.fixture(scope="module")
def batch_job(session: Session) -> dict[str, Any]:
    templates = session.blueprints["batch-training"].templates
    resources = templates["TrainingClusterStack"]["Resources"]
    (job,) = [r for r in resources.values() if r["Type"] == "AWS::Batch::JobDefinition"]
    return dict(job["Properties"])


def test_batch_retries_a_lost_host_or_worker_and_exits_on_an_application_error(batch_job: dict[str, Any]) -> None:
    assert batch_job["RetryStrategy"] == {
        "Attempts": 4,  # training.job.max_retries (3) + 1
        "EvaluateOnExit": [{"OnExitCode": "42", "Action": "EXIT"}, {"OnStatusReason": "Host EC2*", "Action": "RETRY"}],
    }


def test_batch_job_checkpoints_per_job_id_and_the_shell_expands_it(batch_job: dict[str, Any]) -> None:
    command = batch_job["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Command"]
    assert command[:2] == ["bash", "-c"]
    assert command[2].startswith(f"exec python {resilience.LAUNCHER} --nnodes=${{AWS_BATCH_JOB_NUM_NODES}} ")
    # What the container's shell passes to the script: every attempt of job <id> (node IDs are <id>#<node>) resumes
    # from the same directory.
    script = command[2].split(" /opt/mlstack/runtime/workloads/train.py ", 1)[1]
    env = {"AWS_BATCH_JOB_ID": "6f1a2b3c-1111-2222-3333-444455556666#1", "PATH": "/usr/bin:/bin"}
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {script}"], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")[:-1]
    assert words[:7] == [
        "--checkpoint-dir", "/fsx/checkpoints/6f1a2b3c-1111-2222-3333-444455556666", "--checkpoint-every", "100",
        "--keep-checkpoints", "3", "--resume",
    ]  # fmt: skip
    assert shlex.split(script)[0] == "--checkpoint-dir"
