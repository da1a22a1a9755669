"""Shared base for blueprint models: strict (unknown keys rejected), frozen, no coercion surprises."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from mlstack.common import pascal_id

__all__ = ["StrictModel", "email_addresses", "pascal_id"]


class StrictModel(BaseModel):
    """A blueprint section. Unknown keys are errors, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def every_problem(title: str, problems: list[str], value: dict[str, Any]) -> ValidationError:
    """One validation error per problem line, for a validator that checks several rules and reports them all.

    A validator that raises ValueError reports one line; pydantic merges the errors of a ValidationError
    raised inside a validator into the model's own, so the loader prints every line.
    """
    return ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(type=PydanticCustomError("value_error", "{problem}", {"problem": p}), loc=(), input=value)
            for p in problems
        ],
    )


def email_addresses(field: str, value: list[str]) -> list[str]:
    """`value` unchanged if every entry looks like an e-mail address; else one error naming the bad ones."""
    bad = [v for v in value if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v)]
    if bad:
        raise ValueError(f"{field} {', '.join(map(repr, bad))} are not e-mail addresses")
    return value
