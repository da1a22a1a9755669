"""MLOps decisions the stack passes to its constructs."""

from __future__ import annotations

from dataclasses import dataclass

MLOPS_SERVING_ENVIRONMENT: dict[str, str] = {
    "SAGEMAKER_PROGRAM": "inference.py",
    "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/model/code",
    "SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT": "text/csv",
}
"""How the framework serving container finds the handler the example train.py puts into the model (`code/`), and
CSV as the response type of a request without an Accept header (what the data-quality monitor reads)."""


@dataclass(frozen=True)
class MlopsNames:
    """The fixed names of a blueprint's MLOps resources (the deploy function and the teardown commands name them)."""

    model_package_group: str
    pipeline: str
    endpoint: str
    studio_domain: str


def mlops_names(blueprint_name: str) -> MlopsNames:
    return MlopsNames(
        model_package_group=f"{blueprint_name}-models",
        pipeline=f"{blueprint_name}-pipeline",
        endpoint=f"{blueprint_name}-serving",
        studio_domain=f"{blueprint_name}-studio",
    )
