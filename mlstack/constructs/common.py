"""The plain values constructs share with the blueprint schema, defined in `mlstack.common`."""

from __future__ import annotations

from mlstack.common import LOG_RETENTION_DAYS, pascal_id

__all__ = ["LOG_RETENTION_DAYS", "pascal_id"]
