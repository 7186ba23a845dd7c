"""The events stream (`events.list`): what happened, in the order the log settled it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from better_compute.wire.common import PageLimit, WireAnswer, WireRequest


class EventListQuery(WireRequest):
    """`events.list` filters (query parameters). `after` is an event id from an earlier page (the
    last one received, or `nextCursor`); without it the stream starts at its beginning."""

    type: str | None = None
    subject: str | None = None
    after: str | None = None
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
