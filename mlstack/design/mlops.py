"""MLOps decisions the stack passes to its constructs."""

from __future__ import annotations

MLOPS_SERVING_ENVIRONMENT: dict[str, str] = {
    "SAGEMAKER_PROGRAM": "inference.py",
    "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/model/code",
    "SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT": "text/csv",
}
"""How the framework serving container finds the handler the example train.py puts into the model (`code/`), and
CSV as the response type of a request without an Accept header (what the data-quality monitor reads)."""
