"""The Python each SageMaker framework container runs (`data/sagemaker_images.yaml`), for the scripts shipped to it.

One table, so a script's minimum Python and the image that runs it are checked against the same fact.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, ConfigDict, Field

from mlstack import resources, yamlload

IMAGES_FILE = "sagemaker_images.yaml"


class ImagePython(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repository: str = Field(min_length=1)
    tag: str = Field(min_length=1)
    python: str | None = Field(pattern=r"^3\.\d+$")
    """None: the image runs no script of this repository."""
    source: str = Field(min_length=1)


class ImageTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    read: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    images: tuple[ImagePython, ...]


@functools.cache
def image_table() -> ImageTable:
    return ImageTable.model_validate(yamlload.safe_load(resources.catalog_text(IMAGES_FILE)))


def image_python(repository: str, tag: str) -> str | None:
    """The Python version of `repository:tag` ("3.9"), or None when the table does not list the image."""
    for image in image_table().images:
        if (image.repository, image.tag) == (repository, tag):
            return image.python
    return None
