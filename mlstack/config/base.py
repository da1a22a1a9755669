"""Shared base for blueprint models: strict (unknown keys rejected), frozen, no coercion surprises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A blueprint section. Unknown keys are errors, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def pascal_id(name: str) -> str:
    """A blueprint name as a CDK construct ID: `p5-a` -> `P5A`, `ecr.api` -> `EcrApi`.

    The one spelling every construct ID derived from a user's name uses; changing it renames logical IDs
    (and so replaces resources), which the snapshot and pinned-ID tests would show.
    """
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-"))
