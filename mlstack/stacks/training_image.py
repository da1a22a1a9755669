"""The training job's image (`job_image`, every engine that runs the job in a container) and its manifest on the
cluster, for the engines with an EKS cluster (eks, hyperpod-eks): the stacks call `add_first_job`.

With `training.job.image` unset the image is built by `cdk deploy` (`TrainingImage`, from
runtime/containers/train.Dockerfile); the job manifest `mlstack plan` prints, with that image's URI, goes into the
ConfigMap `mlstack-job` of the job namespace, and the stack output `FirstJobCommand` applies it:
`cdk deploy` to a running job needs no copy of a manifest and no image URI pasted by hand.
"""

from __future__ import annotations

import yaml
from aws_cdk import CfnOutput
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import IConstruct

from mlstack import resources
from mlstack.config import BlueprintConfig
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.job_image import TrainingImage
from mlstack.k8s.image import (
    IMAGE_OUTPUT,
    JOB_CONFIGMAP,
    JOB_CONFIGMAP_KEY,
    TRAIN_DOCKERFILE,
    build_excludes,
    builds_image,
    first_job_command,
)
from mlstack.k8s.job import render_job
from mlstack.stacks.base import MlStack


def job_image(stack: MlStack, config: BlueprintConfig) -> str:
    """The job's image URI: built by `cdk deploy` (`TrainingImage` "TrainingImage" in `stack`, and the stack output
    `TrainingImageUri`; a token) when `builds_image`, else the blueprint's `training.job.image`. Every engine that
    runs the job in a container (EKS, hyperpod-eks, batch) takes its image from here."""
    training = config.training
    assert training is not None
    if not builds_image(config):
        assert training.job.image is not None
        return training.job.image
    image = TrainingImage(
        stack,
        "TrainingImage",
        directory=resources.runtime_path(),
        file=TRAIN_DOCKERFILE,
        exclude=build_excludes(),
        # x86: every engine that builds the image runs it on x86 accelerated nodes.
        platform=ecr_assets.Platform.LINUX_AMD64,
    ).image_uri
    CfnOutput(
        stack,
        IMAGE_OUTPUT,
        value=image,
        description="The training image cdk deploy built from runtime/containers/train.Dockerfile",
    )
    return image


def add_first_job(stack: MlStack, config: BlueprintConfig, cluster: TrainingCluster, namespace: IConstruct) -> str:
    """The image (built, or the blueprint's), the job ConfigMap (after the `namespace` manifest) and the outputs.
    Returns the image URI (a token when built)."""
    training = config.training
    assert training is not None
    image = job_image(stack, config)
    manifest = yaml.safe_dump_all(render_job(config, image), sort_keys=False, default_flow_style=False)
    job = cluster.add_manifest(
        "FirstJob",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": JOB_CONFIGMAP, "namespace": training.job.namespace},
            "data": {JOB_CONFIGMAP_KEY: manifest},
        },
    )
    job.node.add_dependency(namespace)
    CfnOutput(
        stack,
        "FirstJobCommand",
        value=first_job_command(training),
        description="On the admin host, once the job's nodes are Ready: start the example job",
    )
    return image
