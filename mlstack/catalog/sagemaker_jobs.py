"""Which catalog instance types SageMaker offers for which job type (processing, training, hosting).

Pure data and checks (no CDK): the blueprint model, the pipeline builder and `mlstack plan` share them.
"""

from __future__ import annotations

from typing import Literal

from mlstack.catalog.instances import get_instance
from mlstack.errors import CatalogError

JobType = Literal["processing", "training", "hosting"]

_G_SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")
PROCESSING_INSTANCE_TYPES = frozenset(
    {
        "ml.c6i.xlarge",
        "ml.c6i.8xlarge",
        "ml.c6i.32xlarge",
        "ml.c7i.xlarge",
        "ml.c7i.8xlarge",
        "ml.c7i.24xlarge",
        "ml.c7i.48xlarge",
        "ml.m7i.large",
        "ml.m7i.xlarge",
        "ml.m7i.8xlarge",
        "ml.m7i.24xlarge",
        "ml.m7i.48xlarge",
        "ml.p5.4xlarge",
        *(f"ml.{family}.{size}" for family in ("g5", "g6", "g6e") for size in _G_SIZES),
    }
)
"""Catalog types that botocore 1.44.8's sagemaker `ProcessingInstanceType` enum lists (tests re-check it against
botocore); the catalog's own `sagemaker_training` / `sagemaker_hosting` flags answer for the other job types.
No p4d, p5.48xlarge, trn1, inf2 or Graviton type is offered for processing."""


def check_instance(job: JobType, instance_type: str) -> str | None:
    """One line if `instance_type` is not a catalog type that SageMaker offers for `job`, else None."""
    if not instance_type.startswith("ml."):
        return f"{job} instance {instance_type!r}: SageMaker jobs take ml.* types (e.g. ml.{instance_type})"
    try:
        it = get_instance(instance_type)
    except CatalogError as err:
        return f"{job} instance {instance_type!r}: {err}".splitlines()[0]
    offered = {
        "training": it.sagemaker_training,
        "hosting": it.sagemaker_hosting,
        "processing": instance_type in PROCESSING_INSTANCE_TYPES,
    }[job]
    if not offered:
        return f"{job} instance {instance_type!r}: SageMaker does not offer it for {job} jobs; pick another type"
    return None
