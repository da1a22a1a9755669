"""`TrainingImage`: the training job's image, built by `cdk deploy` from a Dockerfile in the repository."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aws_cdk import IgnoreMode
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct


class TrainingImage(Construct):
    """A CDK Docker image asset: synth only stages the build context (a copy of `directory` less `exclude`, into
    the cloud assembly) and names the image by a hash of that content; `cdk deploy` runs `docker build` there and
    pushes the image to the CDK bootstrap repository (`cdk-<qualifier>-container-assets-<account>-<region>`),
    before it deploys the stack. Nodes pull it with the ECR read permissions of their role.

    Props (keyword): `directory` (the build context), `file` (the Dockerfile, relative to `directory`),
    `exclude` (Docker-ignore patterns: keep the context to what the Dockerfile copies, so the tag changes only
    when that does; default none), `platform` (linux/amd64: the image runs on x86 accelerated nodes whatever
    machine builds it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        directory: Path,
        file: str,
        exclude: Sequence[str] = (),
        platform: ecr_assets.Platform | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(directory),
            file=file,
            exclude=list(exclude),
            ignore_mode=IgnoreMode.DOCKER,
            platform=platform or ecr_assets.Platform.LINUX_AMD64,
            display_name=f"{construct_id} ({file})",
        )

    @property
    def image_uri(self) -> str:
        """The pushed image's URI (a token: account and region resolve in CloudFormation, the tag is the hash)."""
        return self.asset.image_uri
