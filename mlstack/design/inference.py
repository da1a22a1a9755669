"""Where an inference blueprint's storage lives (`InferenceStorage`): what `DataStack` creates (it deploys first and
is filled before the endpoints: the model bucket, a same-account image repository) and what `InferenceStack` does
(the data-capture / async-results bucket). The stacks, the plan and the footprint read it."""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.config.inference import EcrImage, InferenceConfig


@dataclass(frozen=True)
class InferenceStorage:
    model_bucket: bool
    """DataStack creates the model bucket (and its access-log bucket); False: the blueprint names an existing one."""
    image_repository: str | None
    """The ECR repository DataStack creates (an `ecr` image with `create_repository`), by name; else None."""
    data_bucket: bool
    """InferenceStack's bucket for data capture and async requests, results and failures (an endpoint needs it)."""


def inference_storage(inference: InferenceConfig) -> InferenceStorage:
    image = inference.model.image
    return InferenceStorage(
        model_bucket=inference.model.artifact.existing_bucket is None,
        image_repository=image.repository if isinstance(image, EcrImage) and image.create_repository else None,
        data_bucket=inference.needs_data_bucket,
    )
