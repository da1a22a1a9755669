"""Errors a user can act on.

Everything the user can get wrong (a blueprint field, a CLI flag, an instance type) raises a subclass of
`MlstackError`. The CLI and `app.py` print these as one line per problem and exit non-zero, never with a
traceback; anything else escaping is a bug in mlstack.
"""

from __future__ import annotations


class MlstackError(Exception):
    """Base class of errors caused by user input. `problems` holds one line per problem."""

    def __init__(self, *problems: str) -> None:
        if not problems:
            raise TypeError("MlstackError needs at least one problem line")
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


class BlueprintError(MlstackError, ValueError):
    """A blueprint file is missing, unreadable or invalid."""


class CatalogError(MlstackError, ValueError):
    """An instance type is unknown, or lacks a capability that was asked of it."""


class InputError(MlstackError, ValueError):
    """A command-line value is out of range or contradicts another."""
