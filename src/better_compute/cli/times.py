"""Times as the CLI reads and prints them: ISO 8601 in, UTC to the second out."""

from __future__ import annotations

from datetime import UTC, datetime

import typer


def when(value: datetime) -> str:
    """A time in UTC to the second, e.g. `2030-01-01 10:00:00Z`: one token a reader copies whole
    (no space is cut at, see `tables.py`), and the same in every table and detail view."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def parse_time(text: str | None, option: str) -> datetime | None:
    """An ISO 8601 time given to `option`; one without a zone is read in the local zone, as a person
    typing `2030-01-01T10:00` means their own clock."""
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 time (such as 2030-01-01T10:00Z)", param_hint=option
        ) from None
    return parsed if parsed.tzinfo else parsed.astimezone()
