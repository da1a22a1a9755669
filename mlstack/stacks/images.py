"""Blueprint image settings -> `ServingImage` (the constructs never read the blueprint schema)."""

from __future__ import annotations

from aws_cdk import aws_ecr as ecr

from mlstack.config.inference import DlcImage, EcrImage
from mlstack.constructs.inference import ServingImage


def serving_image(image: EcrImage | DlcImage, region: str, repository: ecr.IRepository | None = None) -> ServingImage:
    """A same-account image (from `repository` when this app manages it), or a DLC in its regional registry
    (account from the catalog table unless the blueprint names one)."""
    if isinstance(image, EcrImage):
        if repository is not None:
            return ServingImage.from_repository(repository, image.repository, image.tag)
        return ServingImage.from_registry(image.repository, image.tag)
    return ServingImage.from_registry(
        image.repository, image.tag, account=image.registry_account(region), region=image.region
    )
