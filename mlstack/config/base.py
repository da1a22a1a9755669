"""Shared base for blueprint models: strict (unknown keys rejected), frozen, no coercion surprises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from mlstack.constructs.common import pascal_id

__all__ = ["StrictModel", "pascal_id"]


class StrictModel(BaseModel):
    """A blueprint section. Unknown keys are errors, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
