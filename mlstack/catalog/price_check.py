"""Checks a plan's prices against the day it is made: the oldest date used and the dates past `MAX_PRICE_AGE_DAYS`.

Pure functions over (item, date) pairs: the caller passes the day to compare against (nothing here reads the
clock), so a test fixes it. An item with a price but no date is reported as an error: no plan prices with an
undated rate (every catalog row has `as_of`; this is the check that holds the plan to it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from mlstack.catalog.prices import MAX_PRICE_AGE_DAYS, date_is_stale

__all__ = ["REFRESH_HINT", "age_warnings", "undated"]

REFRESH_HINT = "re-price with `mlstack prices refresh` (AWS Price List API)"


def undated(priced: Iterable[tuple[str, str | None]]) -> list[str]:
    """The items priced without a date (must be empty)."""
    return [item for item, date in priced if not date]


def age_warnings(
    priced: Iterable[tuple[str, str | None]], today: dt.date, max_age_days: int = MAX_PRICE_AGE_DAYS
) -> list[str]:
    """One line with the oldest price date used, one naming each item whose price is older than `max_age_days`."""
    dated = [(item, date) for item, date in priced if date]
    if not dated:
        return []
    first_item, first_date = min(dated, key=lambda pair: pair[1])
    out = [f"prices: oldest price date used {first_date} ({first_item})"]
    old = [f"{item} ({date})" for item, date in dated if date_is_stale(date, today, max_age_days)]
    if old:
        out.append(f"prices older than {max_age_days} days on {today.isoformat()}: {'; '.join(old)}; {REFRESH_HINT}")
    return out
