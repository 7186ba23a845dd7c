"""The events stream (`events.list`): what happened, in the order the log settled it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from better_compute.wire.common import PageLimit, WireAnswer, WireRequest

MAX_SINCE_TEXT = 64
"""The longest `since` read: a time or a duration is far shorter."""


class EventListQuery(WireRequest):
    """`events.list` filters (query parameters). `after` is an event id from an earlier page (the
    last one received, or `nextCursor`); without it the stream starts at its beginning. `since` (an
    RFC 3339 time, or a duration such as `1h` back from the server's clock) keeps the events logged
    at or after it. `last` (1 to 1000, not with `limit`) answers the newest `last` events, oldest
    first, with no `nextCursor`: a follower goes on after the last one's id."""

    type: str | None = None
    subject: str | None = None
    after: str | None = None
    since: str | None = Field(default=None, json_schema_extra={"maxLength": MAX_SINCE_TEXT})
    last: PageLimit = None
    limit: PageLimit = None


class EventPublic(WireAnswer):
    """One event: its id, its type (`ledger.booked`), what it happened to (`subject`: an allocation,
    a pool, a tenant, a node), when it was logged, and its payload (camelCase keys, ISO 8601 UTC
    times; each type's fields are listed in docs/api.md)."""

    id: int
    type: str
    subject: str
    time: datetime
    payload: dict[str, Any] = Field(default_factory=dict)
