"""Shared base for blueprint models: strict (unknown keys rejected), frozen, no coercion surprises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A blueprint section. Unknown keys are errors, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
