"""The example job's image and script: the deploy builds the training image, the job manifest it puts on the
cluster names that image, stock images and Neuron groups with the shipped script are rejected, and on
hyperpod-eks the job is a PyTorchJob HyperPod's job auto-resume acts on."""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from mlstack import blueprint, local_deploy, resources
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.config.training import SHIPPED_SCRIPT
from mlstack.constructs.training.job_image import TrainingImage
from mlstack.constructs.training.node_group import NODE_ROLE_POLICIES
from mlstack.k8s.image import (
    IMAGE_OUTPUT,
    JOB_CONFIGMAP,
    JOB_CONFIGMAP_KEY,
    TRAIN_DOCKERFILE,
    TRAIN_IMAGE_FILES,
    build_excludes,
    with_job_image,
)
from mlstack.k8s.job import render_job
from mlstack.k8s.pytorchjob import AUTO_RESUME, MAX_RETRY
from mlstack.synth_all import cdk_json_context
from mlstack.workloads.resilience import LAUNCHER
from tests.synth import TEST_CONTEXT, Session
from tests.training.test_config import BASE, _problem

DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2"
BUILT = ("eks-gpu-training", "eks-p4d-training", "eks-g6e-training", "hyperpod-eks-training")
"""Shipped blueprints whose deploy builds the training image (every EKS-engine blueprint with a GPU job)."""


def _with(**job: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["training"]["job"] = job
    return data


def _trn1(**job: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["training"]["node_groups"][0].update(instance_type="trn1.32xlarge", availability_zones=["use1-az6"])
    data["training"]["job"] = job
    return data


# ------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "image",
    [DLC, "public.ecr.aws/deep-learning-containers/pytorch-training:2.7.1-gpu-py312", "SET-training.job.image"],
)
def test_a_stock_image_with_the_shipped_script_is_one_line_error(tmp_path: Path, image: str) -> None:
    line = _problem(tmp_path, _with(image=image))
    assert f"training.job.image: {image!r} is a stock image without the shipped script {SHIPPED_SCRIPT}" in line
    assert "remove training.job.image so the deploy builds runtime/containers/train.Dockerfile" in line


def test_a_stock_image_with_a_script_of_your_own_and_your_image_with_the_shipped_one_are_fine(tmp_path: Path) -> None:
    from tests.training.test_config import _load

    assert _load(tmp_path, _with(image=DLC, script="/fsx/code/train.py")).training.job.image == DLC
    own = "111122223333.dkr.ecr.us-east-1.amazonaws.com/mlstack-train:1"
    assert _load(tmp_path, _with(image=own)).training.job.script == SHIPPED_SCRIPT


def test_neuron_job_needs_a_script_and_an_image_of_your_own(tmp_path: Path) -> None:
    line = _problem(tmp_path, _trn1(image="x.example.com/neuron:1"))
    assert f"training.job.script: the shipped reference script {SHIPPED_SCRIPT} runs on CUDA (NCCL) or CPU" in line
    assert "not on Neuron (trn1.32xlarge in node group 'p5')" in line and "torch-neuronx" in line
    line = _problem(tmp_path, _trn1(script="/fsx/code/train.py"))
    assert "training.job.image: not set, so the deploy would build runtime/containers/train.Dockerfile" in line


def test_shipped_blueprints_build_the_image_except_trainium() -> None:
    for name in BUILT:
        job = load(name).training.job  # type: ignore[union-attr]
        assert job.image is None and job.script == SHIPPED_SCRIPT, name
    trn1 = load("eks-trn1-training").training
    assert trn1 is not None and trn1.job.script != SHIPPED_SCRIPT and "neuronx" in str(trn1.job.image)


# --------------------------------------------------------------------------------------------- hyperpod-eks job


def _hyperpod(tmp_path: Path, **job: Any) -> Any:
    data = yaml.safe_load((BLUEPRINTS_DIR / "hyperpod-eks-training.yaml").read_text())
    data["training"]["job"].update(job)
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_hyperpod_eks_job_is_a_pytorchjob_hyperpod_auto_resumes() -> None:
    config = load("hyperpod-eks-training")
    (job,) = render_job(config, image="acct.dkr.ecr.us-east-1.amazonaws.com/x:1")
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    meta = job["metadata"]
    assert meta["namespace"] == "hyperpod-training" == config.training.job.namespace  # type: ignore[union-attr]
    assert meta["annotations"] == {AUTO_RESUME: "true", MAX_RETRY: "3"}
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {k: (r["replicas"], r["restartPolicy"]) for k, r in replicas.items()} == {
        "Master": (1, "OnFailure"),
        "Worker": (1, "OnFailure"),
    }
    assert job["spec"]["nprocPerNode"] == "8"
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        assert pod["nodeSelector"]["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
        (container,) = pod["containers"]
        assert container["name"] == "pytorch" and container["image"] == "acct.dkr.ecr.us-east-1.amazonaws.com/x:1"
        command = container["command"]
        assert command[:7] == [
            "python",
            LAUNCHER,
            "--nproc-per-node=8",
            "--nnodes=$(PET_NNODES)",
            "--node-rank=$(PET_NODE_RANK)",
            "--master-addr=$(MASTER_ADDR)",
            "--master-port=$(MASTER_PORT)",
        ]
        assert command[7] == SHIPPED_SCRIPT and "--resume" in command and "deepspeed" in command
        assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32


def test_hyperpod_eks_one_node_job_has_no_workers_and_retries_are_configurable(tmp_path: Path) -> None:
    (job,) = render_job(load(_hyperpod(tmp_path, nodes=1, max_retries=7)))
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert job["metadata"]["annotations"][MAX_RETRY] == "7"


def test_hyperpod_eks_namespace_outside_auto_resume_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"training.job.namespace: 'training' is outside the namespaces HyperPod"):
        load(_hyperpod(tmp_path, namespace="training"))
    for ok in ("kubeflow", "hyperpod-team-a"):
        assert load(_hyperpod(tmp_path, namespace=ok)).training.job.namespace == ok  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- image build


def _copied_files(dockerfile: str) -> set[str]:
    copied: set[str] = set()
    for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    return copied


def test_build_context_is_exactly_what_the_dockerfile_copies() -> None:
    text = resources.runtime_path(TRAIN_DOCKERFILE).read_text()
    assert _copied_files(text) == set(TRAIN_IMAGE_FILES) - {TRAIN_DOCKERFILE}
    assert "FROM ${BASE}" in text and "ARG BASE=public.ecr.aws/deep-learning-containers/pytorch-training:" in text
    ignore = resources.runtime_path("containers", "train.Dockerfile.dockerignore").read_text()
    assert [line for line in ignore.splitlines() if line and not line.startswith("#")] == build_excludes()


def _stage(directory: Path, outdir: Path) -> tuple[str, set[str]]:
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "S")
    image = TrainingImage(stack, "TrainingImage", directory=directory, file=TRAIN_DOCKERFILE, exclude=build_excludes())
    app.synth()
    tag = image.asset.asset_hash
    staged = outdir / f"asset.{tag}"
    return tag, {str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file()}


def test_staged_context_and_tag_ignore_everything_else(tmp_path: Path) -> None:
    import shutil

    source = tmp_path / "runtime"
    shutil.copytree(resources.runtime_path(), source, ignore=shutil.ignore_patterns("__pycache__"))
    tag, files = _stage(source, tmp_path / "a")
    assert files == set(TRAIN_IMAGE_FILES)
    # Byte code and files the Dockerfile does not copy change neither the context nor the tag.
    (source / "workloads" / "__pycache__").mkdir()
    (source / "workloads" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (source / "hyperpod_eks" / "new.sh").write_text("echo\n")
    assert _stage(source, tmp_path / "b") == (tag, files)
    (source / "workloads" / "train.py").write_text("# changed\n")
    assert _stage(source, tmp_path / "c")[0] != tag


# ------------------------------------------------------------------------------------------- synthesized stacks


def _first_job(template: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The ConfigMap manifest the deploy applies, and its `job.yaml` as CloudFormation holds it."""
    for resource in template["Resources"].values():
        if resource["Type"] != "Custom::AWSCDK-EKS-KubernetesResource":
            continue
        manifest = resource["Properties"]["Manifest"]
        if JOB_CONFIGMAP in json.dumps(manifest):
            return resource, manifest
    raise AssertionError("no job ConfigMap")


def _joined(value: Any) -> str:
    """A Fn::Join of strings and one Fn::Sub (the image URI) as text, the URI kept as `${Sub:...}`."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_joined(p) for p in parts)
    if "Fn::Sub" in value:
        return "${Sub:" + str(value["Fn::Sub"]) + "}"
    return json.dumps(value)


@pytest.mark.parametrize("name", BUILT)
def test_deploy_builds_the_image_and_the_job_manifest_on_the_cluster_names_it(session: Session, name: str) -> None:
    from tests.conftest import selected_blueprints

    if name not in selected_blueprints():
        pytest.skip(f"{name} not selected by MLSTACK_TEST_BLUEPRINTS")
    synthesized = session.blueprints[name]
    template = synthesized.templates["TrainingClusterStack"]
    uri = template["Outputs"][IMAGE_OUTPUT]["Value"]["Fn::Sub"]
    region = synthesized.config.env.region
    assert re.fullmatch(
        rf"\$\{{AWS::AccountId\}}\.dkr\.ecr\.{region}\.\$\{{AWS::URLSuffix\}}/"
        rf"cdk-hnb659fds-container-assets-\$\{{AWS::AccountId\}}-{region}:[0-9a-f]{{64}}",
        uri,
    ), uri
    resource, manifest = _first_job(template)
    text = _joined(manifest)
    docs = json.loads(text.replace("${Sub:" + uri + "}", "IMAGE"))
    (config_map,) = docs
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == JOB_CONFIGMAP
    config = synthesized.config
    assert config.training is not None
    assert config_map["metadata"]["namespace"] == config.training.job.namespace
    jobs = list(yaml.safe_load_all(config_map["data"][JOB_CONFIGMAP_KEY]))
    assert jobs == render_job(config, image="IMAGE")
    # After the namespace exists (the kubectl handler applies into it).
    namespace = next(k for k in template["Resources"] if k.startswith("TrainingClustermanifestJobNamespace"))
    assert namespace in resource["DependsOn"]
    assert "get configmap mlstack-job" in template["Outputs"]["FirstJobCommand"]["Value"]
    # The cloud assembly carries the staged context and the Dockerfile for `cdk deploy` to build.
    assets = json.loads(
        next(Path(session.outdir, f"assembly-{name}").glob("*TrainingClusterStack*.assets.json")).read_text()
    )
    (docker,) = assets["dockerImages"].values()
    assert docker["source"]["dockerFile"] == TRAIN_DOCKERFILE
    assert docker["source"].get("platform") == "linux/amd64"
    staged = Path(session.outdir, f"assembly-{name}", docker["source"]["directory"])
    assert {str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file()} == set(TRAIN_IMAGE_FILES)


def test_nodes_can_pull_from_the_bootstrap_repository() -> None:
    # EKS node role: AmazonEC2ContainerRegistryReadOnly (ecr:GetAuthorizationToken, BatchGetImage,
    # GetDownloadUrlForLayer on every repository of the account), which includes the bootstrap repository.
    assert "AmazonEC2ContainerRegistryReadOnly" in NODE_ROLE_POLICIES
    # HyperPod nodes pull with the execution role: its EcrPull statement must cover the bootstrap repository.
    from mlstack.constructs.training.hyperpod_policy import eks_node_statements

    stack = cdk.Stack()
    statements = [stack.resolve(s.to_statement_json()) for s in eks_node_statements("arn:aws:eks:::cluster/c")]
    pull = next(s for s in statements if s["Sid"] == "EcrPull")
    assert "ecr:BatchGetImage" in pull["Action"] and "ecr:GetDownloadUrlForLayer" in pull["Action"]
    parts = pull["Resource"]["Fn::Join"][1]
    pattern = "".join(
        p if isinstance(p, str) else {"AWS::Partition": "aws", "AWS::Region": "us-east-1"}[p["Ref"]] for p in parts
    )
    repo = "arn:aws:ecr:us-east-1:123456789012:repository/cdk-hnb659fds-container-assets-123456789012-us-east-1"
    assert fnmatch.fnmatch(repo, pattern)


def test_training_image_context_builds_nothing(tmp_path: Path) -> None:
    config = with_job_image(load("eks-g6e-training"), "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1")
    app = cdk.App(outdir=str(tmp_path), context={**cdk_json_context(), **TEST_CONTEXT})
    built = blueprint.build(app, config)
    assembly = app.synth()
    assert built.training is not None
    stack = assembly.get_stack_artifact(built.training.artifact_id)
    assets = json.loads(next(tmp_path.glob("*TrainingClusterStack*.assets.json")).read_text())
    assert not assets.get("dockerImages")
    template = stack.template
    assert IMAGE_OUTPUT not in template["Outputs"]
    _, manifest = _first_job(template)
    assert "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1" in _joined(manifest)


def _record(calls: list[list[str]], argv: list[str]) -> str:
    calls.append(list(argv))
    return ""


def test_local_deploy_names_an_image_instead_of_building_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def no_server(*args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    monkeypatch.setattr(local_deploy, "moto_server", no_server)
    monkeypatch.setattr(local_deploy, "report", lambda *args: "")
    calls: list[list[str]] = []
    local_deploy.local_deploy(
        "eks-g6e-training", port=1, workdir=tmp_path, create_only=True, runner=lambda argv, env: _record(calls, argv)
    )
    (deploy,) = [argv for argv in calls if "deploy" in argv]
    assert f"training-image={local_deploy.LOCAL_TRAINING_IMAGE}" in deploy
