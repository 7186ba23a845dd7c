"""The events stream: `events.list`, pages of the event log for people and scripts to follow.

Every change the server makes appends an event in its own transaction (domain/kernel/events.py); this is
where callers read them back, oldest first, resuming after the last id they received. The store
serves only settled events in an order that no later commit can get in front of
(storage/kernel/event_stream.py), so following the stream page after page skips nothing and repeats
nothing. Which events a caller may read is `domain.ops.audience`'s rule: the admin reads every event, a
tenant the events about itself.

A type this version does not know is refused with the known ones listed, rather than matching
nothing: a typo (`ledger.book`) would otherwise read as "nothing happened".
"""

from __future__ import annotations

import re
from datetime import datetime

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.events import StreamedEvent, check_event_id, check_event_type
from better_compute.domain.kernel.timewin import MAX_DURATION_TEXT, parse_duration
from better_compute.domain.ops.audience import Reader
from better_compute.domain.ops.event_types import EVENT_TYPES
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, tenant_scope
from better_compute.service.fleet.pools import seen_pool_ids
from better_compute.service.kernel.paging import DEFAULT_LIMIT, Listing
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ops.ports import OpsTx

MAX_LAST = 1000
"""The most events `last` asks for: one page, as `limit`'s most."""

_LOOKS_LIKE_A_DATE = re.compile(r"\d{4}-")
"""Text starting as a calendar date is read as a time, whose error then says what a time needs."""

_SINCE_HELP = "a time such as 2026-12-01T09:00:00Z or a span back from now such as 1h, 30m or 2d"


def since_time(text: str, now: datetime) -> datetime:
    """The time `since` names: an RFC 3339 time (with its zone), or a duration (`1h`, `30m`, `2d`,
    `PT4H`) back from `now`, the server's clock, so that a caller's own clock does not move it."""
    if len(text) > MAX_DURATION_TEXT:
        raise InvalidInput(
            f"since is {len(text)} characters long; give {_SINCE_HELP} (at most {MAX_DURATION_TEXT})",
            {"field": "since", "maxLength": MAX_DURATION_TEXT},
        )
    raw = text.strip()
    if _LOOKS_LIKE_A_DATE.match(raw):
        try:
            at = datetime.fromisoformat(raw)
        except ValueError:
            raise InvalidInput(
                f"since {text!r} is not a time: give {_SINCE_HELP}", {"field": "since", "value": text}
            ) from None
        if at.tzinfo is None:
            raise InvalidInput(
                f"since {text!r} has no zone: add one, as in 2026-12-01T09:00:00Z or +02:00",
                {"field": "since", "value": text},
            )
        return at
    try:
        span = parse_duration(raw, "since")
    except InvalidInput:
        raise InvalidInput(
            f"since {text!r} is neither a time nor a duration: give {_SINCE_HELP}",
            {"field": "since", "value": text},
        ) from None
    try:
        return now - span
    except OverflowError:
        raise InvalidInput(
            f"since {text!r} reaches back before the year 1", {"field": "since", "value": text}
        ) from None


def known_type(type_: str) -> str:
    """`type_`, when it is spelled as types are and this version logs it; refused otherwise, with
    the known types listed (in the message and under `accepted`)."""
    wanted = check_event_type(type_)
    if wanted not in EVENT_TYPES:
        known = sorted(EVENT_TYPES)
        raise InvalidInput(
            f"type {wanted!r} is not an event this server logs; known: {', '.join(known)}",
            {"field": "type", "value": wanted, "accepted": known},
        )
    return wanted


def list_events(
    store: StorePort[OpsTx],
    principal: Principal,
    *,
    type_: str | None = None,
    subject: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    since: datetime | None = None,
    last: int | None = None,
) -> Listing[StreamedEvent]:
    """A page of the events the caller may read, after the event `after` (an id from an earlier
    page; from the start without it), of type `type_`, about `subject` and logged at or after
    `since` when given. `next_cursor` is the last item's id when the page is full, so more may
    follow; a follower that reached the end asks again after the last id it received.

    `last` asks instead for the newest `last` of those events, still oldest first: the stream's end,
    so `next_cursor` is None, and a follower goes on after the last item's id."""
    wanted_type = None if type_ is None else known_type(type_)
    wanted_subject = None if subject is None else check_ref(subject, "subject")
    after_id = None if after is None else check_event_id(after)
    if last is not None:
        if limit is not None:
            raise InvalidInput(
                "last and limit are not given together: last is the newest events, limit a page"
                " of the oldest",
                {"field": "last"},
            )
        if not 1 <= last <= MAX_LAST:
            raise InvalidInput(f"last must be 1 to {MAX_LAST}, not {last}", {"field": "last"})
    size = last or limit or DEFAULT_LIMIT
    with store.read() as tx:
        start = None
        if after_id is not None:
            start = tx.events.position(after_id)
            if start is None:
                raise InvalidInput(
                    f"after: no event has id {after_id}; pass the id of an event already read",
                    {"field": "after"},
                )
        own = tenant_scope(principal, None)  # None for the admin, else the token's own tenant
        reader = Reader(own, frozenset(seen_pool_ids(tx, principal)) if own is not None else frozenset())
        if last is not None:
            newest = tx.events.stream(reader, start, size, wanted_type, wanted_subject, since, last=True)
            return Listing(newest, None)
        found = tx.events.stream(reader, start, size + 1, wanted_type, wanted_subject, since)
    page = found[:size]
    return Listing(page, str(page[-1].id) if len(found) > size and page else None)
