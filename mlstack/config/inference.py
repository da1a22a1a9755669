"""The `inference:` section of a blueprint (InferenceStack). Owned by the inference layer."""

from __future__ import annotations

from mlstack.config.base import StrictModel


class InferenceConfig(StrictModel):
    """Placeholder until the inference issue lands: the section is rejected by `blueprint.build`."""
