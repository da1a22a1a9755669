"""The `training:` section of a blueprint (TrainingClusterStack). Owned by the training layer."""

from __future__ import annotations

from mlstack.config.base import StrictModel


class TrainingConfig(StrictModel):
    """Placeholder until the training-cluster issue lands: the section is rejected by `blueprint.build`."""
