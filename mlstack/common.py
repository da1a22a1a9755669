"""Plain values the constructs share with the blueprint schema (no CDK import), below both: the schema and the
constructs import these, so both spell a construct ID or a retention period the same way, and neither imports the
other (`mlstack.constructs.common` re-exports them for constructs).
"""

from __future__ import annotations

LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
"""The retention periods CloudWatch Logs accepts, in days (CloudWatch Logs API Reference, PutRetentionPolicy)."""


def pascal_id(name: str) -> str:
    """A user-given name as a CDK construct ID: `p5-a` -> `P5A`, `ecr.api` -> `EcrApi`.

    The one spelling every construct ID derived from a user's name uses; changing it renames logical IDs
    (and so replaces resources), which the snapshot and pinned-ID tests would show.
    """
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-"))
